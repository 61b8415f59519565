"""The input pipeline: JPEG decode + transforms per minibatch, for a few loader counts.

With a real image folder the DataLoader is timed with 0 (the main process loads),
then 1, 2, ... loader processes; ``load_s_per_batch`` is the main-process time per
minibatch, the cost one loader process pays for one batch. The loader processes needed to
hide it behind a step come from :func:`scalelab.theory.io.loader_workers_needed`.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from scalelab.errors import UsageError
from scalelab.theory import io as theory_io

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def check_folder(path: str | os.PathLike) -> Path:
    """An ImageFolder layout (class sub-folders of images), or a UsageError saying why not."""
    root = Path(path)
    if not root.exists():
        raise UsageError(f"--data {root}: no such folder")
    if not root.is_dir():
        raise UsageError(f"--data {root}: not a folder")
    if not os.access(root, os.R_OK | os.X_OK):
        raise UsageError(f"--data {root}: cannot read the folder")
    try:
        classes = [d for d in root.iterdir() if d.is_dir()]
        found = any(f.suffix.lower() in IMAGE_SUFFIXES for d in classes for f in d.iterdir())
    except OSError as e:
        raise UsageError(f"--data {root}: cannot read: {e.strerror or e}") from None
    if not found:
        raise UsageError(f"--data {root}: no images found (expected class sub-folders "
                         "of .jpg/.png files, as torchvision's ImageFolder reads)")
    return root


def image_dataset(path: str | os.PathLike, input_shape: tuple[int, ...]):
    """torchvision ImageFolder with resize-crop to the workload's input size."""
    from torchvision import datasets, transforms

    size = input_shape[-1] if len(input_shape) == 3 else 224
    tf = transforms.Compose([
        transforms.RandomResizedCrop(size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ])
    return datasets.ImageFolder(str(path), transform=tf)


def _time_loader(dataset, batch_size: int, workers: int, batches: int) -> float:
    """Median seconds between minibatches delivered by a DataLoader (first one excluded)."""
    import torch

    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                         num_workers=workers, drop_last=False,
                                         generator=torch.Generator().manual_seed(0))
    gaps = []
    it = iter(loader)
    next(it)
    t = time.perf_counter()
    for _ in range(batches):
        try:
            next(it)
        except StopIteration:
            it = iter(loader)
            next(it)
        now = time.perf_counter()
        gaps.append(now - t)
        t = now
    del it
    return statistics.median(gaps)


def profile_input(path: str | os.PathLike, input_shape: tuple[int, ...], batch_size: int,
                  compute_s: float, worker_counts=(0, 1, 2), batches: int = 4) -> dict:
    root = check_folder(path)
    dataset = image_dataset(root, input_shape)
    trials = []
    for w in worker_counts:
        gap = _time_loader(dataset, batch_size, w, batches)
        trials.append({"loader_workers": w, "s_per_batch": gap,
                       "exposed_s": theory_io.exposed_io_s(gap if w == 0 else gap * w, w,
                                                           compute_s)})
    load_s = trials[0]["s_per_batch"]
    return {
        "source": str(root),
        "images": len(dataset),
        "batch_size": batch_size,
        "load_s_per_batch": load_s,
        "loader_workers_needed": theory_io.loader_workers_needed(load_s, compute_s),
        "trials": trials,
    }
