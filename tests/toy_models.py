"""Small models used by the tests through the package.module:factory path."""

from torch import nn


def linear(num_classes: int = 4) -> nn.Module:
    return nn.Linear(8, num_classes, bias=False)


def mlp(num_classes: int = 3) -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, num_classes))


def not_a_module():
    return 42
