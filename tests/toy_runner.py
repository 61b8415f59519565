"""Tiny models for the runner tests (no batch normalization: per-sample losses are
independent, so W workers at batch b and one process at batch W*b compute the same mean
gradient)."""

import os
import time

import torch
from torch import nn


def mlp(num_classes: int = 3) -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 12), nn.Tanh(),
                         nn.Linear(12, num_classes))


def conv(num_classes: int = 3) -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3),
                         nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, num_classes))


def linear_big(num_classes: int = 2) -> nn.Module:
    """A linear model without bias started far from its optimum (weights x 5)."""
    m = nn.Linear(8, num_classes, bias=False)
    with torch.no_grad():
        m.weight.mul_(5.0)
    return m


class _Faulty(nn.Module):
    """``mlp`` that fails on a chosen forward call of a chosen rank.

    ``TOY_FAULT=rank:call:kind`` with kind ``raise``, ``exit`` (os._exit(3)) or ``hang``.
    """

    def __init__(self, num_classes):
        super().__init__()
        self.net = mlp(num_classes)
        self.calls = 0
        spec = os.environ.get("TOY_FAULT", "")
        self.fault = spec.split(":") if spec else None

    def forward(self, x):
        self.calls += 1
        if self.fault and os.environ.get("RANK") == self.fault[0] \
                and self.calls == int(self.fault[1]):
            kind = self.fault[2]
            if kind == "exit":
                os._exit(3)
            if kind == "hang":
                time.sleep(3600)
            raise RuntimeError(f"injected fault at forward call {self.calls}")
        return self.net(x)


def faulty_mlp(num_classes: int = 3) -> nn.Module:
    return _Faulty(num_classes)
