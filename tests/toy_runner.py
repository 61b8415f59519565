"""Tiny models for the runner's tests (``tests.toy_runner:<name>``).

None has batch normalization: its statistics are per batch, so W workers at batch b and one
process at batch W*b would differ by construction.

``faulty`` misbehaves on purpose when ``TOY_FAIL=RANK:STEP:ACTION`` names this process's rank
(ACTION ``raise``, ``kill`` (SIGKILL itself) or ``hang``); with ``TOY_PID_DIR`` set every
rank process that builds it records its pid there, so tests can check none is left behind.
"""

import os
import signal
import time

import torch
from torch import nn


def convnet(num_classes: int = 3) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 16),
        nn.ReLU(), nn.Linear(16, num_classes))


def wide(num_classes: int = 3) -> nn.Module:
    return nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                         nn.Linear(32, num_classes))


def far_linear(num_classes: int = 3) -> nn.Module:
    """A linear classifier started far from the optimum of labels independent of the input.

    With inputs ~ N(0, I) and labels uniform and independent of them, the expected
    cross-entropy is minimized exactly by weight 0 and equal biases (softmax = 1/C).
    """
    m = nn.Linear(6, num_classes)
    with torch.no_grad():
        m.weight.mul_(8.0)
        m.bias.copy_(torch.linspace(-2.0, 2.0, num_classes))
    return m


class _Faulty(nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, num_classes))
        self.calls = 0
        pid_dir = os.environ.get("TOY_PID_DIR")
        if pid_dir and "RANK" in os.environ:  # ranks only, not the CLI checking the model
            with open(os.path.join(pid_dir, f"{os.getpid()}.pid"), "w") as f:
                f.write(str(os.getpid()))
        rank, step, self.action = (os.environ.get("TOY_FAIL", "::").split(":") + [""])[:3]
        self.fail_step = int(step) if rank == os.environ.get("RANK") and step else None

    def forward(self, x):
        if self.fail_step is not None and self.calls == self.fail_step:
            if self.action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.action == "hang":
                time.sleep(600)
            raise RuntimeError(f"injected failure at step {self.calls}")
        self.calls += 1
        return self.body(x)


def faulty(num_classes: int = 3) -> nn.Module:
    return _Faulty(num_classes)


class _Probe(nn.Module):
    """A small convnet that writes, per forward, what its first convolution saw: the input's
    and the weight's memory format, the dtype the convolution computed in and the device it
    ran on (``TOY_PROBE_DIR``, one file per rank process)."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Sequential(nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, num_classes))
        self.dir = os.environ.get("TOY_PROBE_DIR") if "RANK" in os.environ else None

    def forward(self, x):
        y = self.conv(x)
        if self.dir:
            cl = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
            wcl = self.conv.weight.is_contiguous(memory_format=torch.channels_last) \
                and not self.conv.weight.is_contiguous()
            with open(os.path.join(self.dir, f"rank{os.environ['RANK']}.txt"), "a") as f:
                f.write(f"{'channels_last' if cl else 'contiguous'} "
                        f"{'channels_last' if wcl else 'contiguous'} {y.dtype} "
                        f"{y.device.type}\n")
        return self.head(y.float())


def probe(num_classes: int = 3) -> nn.Module:
    return _Probe(num_classes)


class _Residual(nn.Module):
    """conv-ReLU-conv plus the input, then ReLU: a residual block without batch norm."""

    def __init__(self, c: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.conv2(torch.relu(self.conv1(x))))


def resnet_like(num_classes: int = 3) -> nn.Module:
    """A ResNet's shape without batch norm: stem, two stages of residual blocks, pool, fc."""
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
        nn.Sequential(_Residual(4), _Residual(4)),
        nn.Sequential(_Residual(4), _Residual(4)),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes))


class _Wide(nn.Module):
    """A block whose activations outweigh its parameters: a small linear map, then a chain of
    element-wise operations, each saving a tensor the size of the batch for backward."""

    def __init__(self, d: int):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        h = self.lin(x)
        for _ in range(6):
            h = torch.tanh(h) * torch.sigmoid(h)
        return x + h


def activation_heavy(num_classes: int = 3) -> nn.Module:
    """Four such blocks and a head: recomputing the blocks frees most of the step's memory."""
    return nn.Sequential(*[_Wide(256) for _ in range(4)], nn.Linear(256, num_classes))
