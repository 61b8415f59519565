"""Models whose training depends on the batch, for the profiler's batch search tests."""

import torch
from torch import nn


def bn_cnn(num_classes: int = 4) -> nn.Module:
    """BatchNorm after global pooling: one value per channel at batch 1, which it refuses."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.BatchNorm1d(8), nn.Linear(8, num_classes),
    )


class _Pairs(nn.Module):
    """Trains only on batches of at most two samples (a stand-in for a batch-shaped bug)."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.fc = nn.Linear(6, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 2:
            raise RuntimeError(f"shape '[2, -1]' is invalid for input of size {x.numel()}")
        return self.fc(x)


def pairs_only(num_classes: int = 3) -> nn.Module:
    return _Pairs(num_classes)


def wide(num_classes: int = 2) -> nn.Module:
    """8 inputs fanned out to 2**24 features: 64 MiB of activations per sample, so a few
    thousand samples do not fit any GPU while the inputs stay tiny on the host."""
    return nn.Sequential(nn.Linear(8, 1 << 24), nn.ReLU(), nn.Linear(1 << 24, num_classes))


class _ReadsValues(nn.Module):
    """Reads a value of its input (``.item()``), which meta tensors do not have."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.fc = nn.Linear(6, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = 1.0 if x.abs().max().item() >= 0 else 0.0
        return self.fc(x) * scale


def reads_values(num_classes: int = 3) -> nn.Module:
    return _ReadsValues(num_classes)
