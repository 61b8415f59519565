"""A model with one depthwise convolution, for the operation counts' tests."""

from torch import nn


class _Depthwise(nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.fc(self.dw(x).mean(dim=(2, 3)))


def depthwise(num_classes: int = 4) -> nn.Module:
    return _Depthwise(num_classes)
