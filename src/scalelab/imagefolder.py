"""Image folders (torchvision's ``ImageFolder`` layout, ``ROOT/<class>/<image>``): check
one, open it as the runner and the profiler decode it, or write a generated one.

:func:`write_image_folder` makes small real data without downloads: N JPEG files of a given
size spread over K classes, the same bytes for the same seed (and Pillow version). Each
image is a smooth field (a coarse random grid scaled up) tinted by its class, so JPEG
decoding costs what it costs on photographs of that size rather than on noise, and the
classes can be told apart. ``python -m scalelab.imagefolder OUT --images 512 --size 96``
writes one from the command line.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from scalelab.errors import UsageError

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


def open_dataset(path: str | os.PathLike, input_shape: tuple[int, ...],
                 num_classes: int | None = None):
    """torchvision ``ImageFolder`` decoded to the workload's input: resize to H x W, tensor.

    Deterministic (no random augmentation), so any process decoding sample i gets the same
    tensor: the runner's workers, its loader processes and a single reference process agree.
    ``C = 1`` converts to grayscale.
    """
    from torchvision import datasets, transforms

    if len(input_shape) != 3:
        raise UsageError(f"--data needs an image input shape C,H,W, got {input_shape}")
    c, h, w = input_shape
    root = check_folder(path)
    steps = [transforms.Resize((h, w)), transforms.ToTensor()]
    if c == 1:
        steps.insert(0, transforms.Grayscale(1))
    try:
        dataset = datasets.ImageFolder(str(root), transform=transforms.Compose(steps),
                                       loader=load_image)
    except (FileNotFoundError, RuntimeError) as e:
        raise UsageError(f"--data {root}: {e}") from None
    if num_classes is not None and len(dataset.classes) > num_classes:
        raise UsageError(f"--data {root} has {len(dataset.classes)} classes, more than "
                         f"--num-classes {num_classes}")
    return dataset


def load_image(path: str):
    """torchvision's loader for one image, with a file it cannot decode named (a module
    function: loader processes get the dataset pickled)."""
    from torchvision.datasets.folder import default_loader

    try:
        return default_loader(path)
    except (OSError, ValueError, SyntaxError) as e:  # PIL's UnidentifiedImageError is an OSError
        raise UsageError(f"--data: {path} cannot be read as an image "
                         f"({type(e).__name__})") from None


@dataclass(frozen=True)
class ImageFolderInfo:
    root: str
    images: int
    classes: int
    size_px: int
    total_bytes: int

    def __post_init__(self):
        if self.images < 1 or self.classes < 1 or self.size_px < 1:
            raise ValueError(f"need images, classes, size_px >= 1; got {self.images}, "
                             f"{self.classes}, {self.size_px}")


def _image(rng: random.Random, size_px: int, cls: int, classes: int):
    from PIL import Image

    grid = 6
    hue = cls / classes
    tint = (int(255 * hue), int(255 * (1 - hue)), 128)
    data = bytes(min(255, max(0, rng.randrange(256) // 2 + tint[i % 3] // 2))
                 for i in range(grid * grid * 3))
    return Image.frombytes("RGB", (grid, grid), data).resize((size_px, size_px),
                                                             Image.Resampling.BICUBIC)


def write_image_folder(root: str | os.PathLike, images: int, size_px: int, classes: int = 2,
                       seed: int = 0, quality: int = 90) -> ImageFolderInfo:
    """Write ``images`` JPEGs of ``size_px`` x ``size_px`` into ``classes`` sub-folders.

    Image i goes to class ``i % classes`` as ``class_<c>/img_<i>.jpg``. The folder must be
    new or empty, so a generated set is never mixed with other files.
    """
    if images < 1 or size_px < 8 or classes < 1 or classes > images:
        raise ValueError(f"need images >= 1, size_px >= 8, 1 <= classes <= images; got "
                         f"images={images}, size_px={size_px}, classes={classes}")
    if not 1 <= quality <= 95:
        raise ValueError(f"JPEG quality must be in 1..95, got {quality}")
    out = Path(root)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty folder")
    rng = random.Random(seed)
    total = 0
    for c in range(classes):
        (out / f"class_{c:03d}").mkdir(parents=True, exist_ok=True)
    for i in range(images):
        c = i % classes
        path = out / f"class_{c:03d}" / f"img_{i:05d}.jpg"
        _image(rng, size_px, c, classes).save(path, "JPEG", quality=quality)
        total += path.stat().st_size
    return ImageFolderInfo(str(out), images, classes, size_px, total)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scalelab.imagefolder",
                                description="Write a generated ImageFolder of JPEG files.")
    p.add_argument("out", help="new or empty folder")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--size", type=int, default=96, metavar="PX", help="side in pixels")
    p.add_argument("--classes", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        info = write_image_folder(args.out, args.images, args.size, args.classes, args.seed)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{info.images} images, {info.classes} classes, {info.size_px} px, "
          f"{info.total_bytes:,} bytes -> {info.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
