"""Tiny models for the comparison tests: almost all parameters in one fully connected layer."""

from torch import nn


def wide_fc(num_classes: int = 10) -> nn.Module:
    """Input 3x16x16 -> 640 -> classes; the first layer holds 99% of the parameters."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 640), nn.ReLU(),
                         nn.Linear(640, num_classes))


def smallconv(num_classes: int = 4) -> nn.Module:
    """Input 3x32x32: three 3x3 convolutions (16, 16, 32 channels), max-pool, global
    average, linear (the model of ``benchmarks/io_masking.py``)."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))
