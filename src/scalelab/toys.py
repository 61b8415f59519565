"""Small models that ship with scalelab, so the examples of ``--help`` run from any folder.

Each is a ``package.module:factory`` model for every command (``scalelab validate
scalelab.toys:alexnet_like --input-shape 3,32,32 ...``): a function of ``num_classes``
returning an ``nn.Module``.

- ``alexnet_like``: AlexNet's shape at 32x32 input: five convolutions, then fully
  connected layers that hold most of the parameters (fc6 is about 62% of the bytes, as in
  AlexNet); 1.7M parameters (6.8 MB of gradients), little compute: the exchange dominates
  at 100-500 Mbit/s.
- ``conv_heavy``: convolutions at full resolution and 66k parameters: compute dominates at
  any rate the emulation shapes.
- ``wide_fc``: input 3x16x16 -> 640 -> classes; the first layer holds 99% of the
  parameters.
- ``smallconv``: input 3x32x32: three 3x3 convolutions (16, 16, 32 channels), max-pool,
  global average, linear.
- ``tiny``: input 12 -> 32 -> classes.
"""

from __future__ import annotations

from torch import nn


def alexnet_like(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 96, 3, padding=1), nn.ReLU(),
        nn.Conv2d(96, 64, 3, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 1024), nn.ReLU(),
        nn.Linear(1024, 512), nn.ReLU(),
        nn.Linear(512, num_classes),
    )


def conv_heavy(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 48, 3, padding=1), nn.ReLU(),
        nn.Conv2d(48, 64, 3, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, num_classes),
    )


def wide_fc(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 640), nn.ReLU(),
                         nn.Linear(640, num_classes))


def smallconv(num_classes: int = 4) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))


def tiny(num_classes: int = 4) -> nn.Module:
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, num_classes))
