"""Tiny models for the comparison tests: almost all parameters in one fully connected layer."""

from torch import nn


def wide_fc(num_classes: int = 10) -> nn.Module:
    """Input 3x16x16 -> 640 -> classes; the first layer holds 99% of the parameters."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 640), nn.ReLU(),
                         nn.Linear(640, num_classes))
