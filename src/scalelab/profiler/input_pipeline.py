"""The input pipeline: JPEG decode + transforms per minibatch, for a few loader counts.

With a real image folder, the images are decoded exactly as ``scalelab run --data`` decodes
them (:func:`scalelab.imagefolder.open_dataset`), through a DataLoader with 0 (the main
process loads), then 1, 2, ... loader processes. ``load_s_per_batch`` is the main-process
time per minibatch, the cost one loader process pays for one batch; ``load_s_per_sample``
is that over the batch size, the decode time of one sample on one core, which the plan
scales to other batch sizes and to a node's cores (:func:`scalelab.theory.io.node_input`).
The loader processes needed to hide loading behind a step come from
:func:`scalelab.theory.io.loader_workers_needed`.
"""

from __future__ import annotations

import os
import statistics
import time

from scalelab.imagefolder import IMAGE_SUFFIXES, check_folder, open_dataset
from scalelab.theory import io as theory_io

__all__ = ["IMAGE_SUFFIXES", "check_folder", "image_dataset", "profile_input"]


def image_dataset(path: str | os.PathLike, input_shape: tuple[int, ...]):
    """The image folder decoded to the workload's input, as the runner decodes it."""
    return open_dataset(path, input_shape)


def _time_loader(dataset, batch_size: int, workers: int, batches: int) -> float:
    """Median seconds between minibatches delivered by a DataLoader (first one excluded).

    The main process decodes on one torch thread (with ``workers = 0`` that is the decode
    time on one core; a DataLoader's own processes run one thread each anyway).
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _gaps(dataset, batch_size, workers, batches)
    finally:
        torch.set_num_threads(threads)


def _gaps(dataset, batch_size: int, workers: int, batches: int) -> float:
    import torch

    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                         num_workers=workers, drop_last=False,
                                         generator=torch.Generator().manual_seed(0))
    gaps = []
    it = iter(loader)
    try:
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
    finally:
        del it
    return statistics.median(gaps)


WARM_CACHE_BYTES = 1 << 30  # folders up to this size are read once before timing


def _warm_page_cache(samples: list[tuple[str, int]]) -> bool:
    """Read a small folder's files once, so that every trial decodes from the page cache
    (as every epoch after the first does) and the first trial does not pay alone for the
    disk. A larger folder is timed as it comes: its reads are part of every epoch."""
    paths = [p for p, _ in samples]
    if sum(os.path.getsize(p) for p in paths) > WARM_CACHE_BYTES:
        return False
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass
    return True


def profile_input(path: str | os.PathLike, input_shape: tuple[int, ...], batch_size: int,
                  compute_s: float, worker_counts=(0, 1, 2), batches: int = 8) -> dict:
    root = check_folder(path)
    dataset = image_dataset(root, input_shape)
    warmed = _warm_page_cache(dataset.samples)
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
        "page_cache_warmed": warmed,
        "batch_size": batch_size,
        "load_s_per_batch": load_s,
        "load_s_per_sample": load_s / batch_size,
        "loader_workers_needed": theory_io.loader_workers_needed(load_s, compute_s),
        "trials": trials,
    }
