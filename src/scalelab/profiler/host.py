"""The host's time to issue one operation of a training step, measured on this CPU.

Every operation a step issues costs the host CPU time whatever device runs it: Python (the
module's ``forward``), the dispatcher, autograd's bookkeeping, and the launch of its kernel.
A GPU cannot start an operation before the host has issued it, so a step is never shorter
than ``operations x host time per operation``
(:func:`scalelab.theory.roofline.host_step_s`).

Measured here on a network whose arithmetic is negligible: ``blocks`` times (3x3
convolution, batch norm, ReLU) on 4 channels of 4x4 pixels at batch 2, then a linear layer
and the cross-entropy loss, forward and backward. Its step time divided by the operations
:mod:`scalelab.opcount` counts for it (the same rule that counts a model's) is the time per
operation; the fastest of ``repeats`` steps is kept, the one least disturbed by other work
on the machine. The tiny kernels still run on the CPU, which stands in for the launch of a
GPU's kernel.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

METHOD = ("fastest of {repeats} forward+backward steps of {blocks} x (3x3 conv, batch norm, "
          "ReLU) on 2x4x4x4 + linear + cross entropy on the CPU, one thread, divided by its "
          "{ops} counted operations")


@dataclass(frozen=True)
class HostCost:
    s_per_op: float  # host seconds per issued operation
    ops: int  # operations of the measured step
    method: str

    def to_dict(self) -> dict:
        return asdict(self)


def measure_host_s_per_op(blocks: int = 32, repeats: int = 20) -> HostCost:
    """Host seconds per operation of a training step on this CPU (see the module)."""
    import torch
    from torch import nn

    from scalelab.opcount import record_step
    from scalelab.workload import WorkloadSpec

    if blocks < 1 or repeats < 1:
        raise ValueError(f"blocks {blocks} and repeats {repeats} must be >= 1")
    layers = []
    for _ in range(blocks):
        layers += [nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
                   nn.ReLU(inplace=True)]
    net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
    x = torch.randn(2, 4, 4, 4)
    y = torch.zeros(2, dtype=torch.long)
    spec = WorkloadSpec(model="resnet18", input_shape=(4, 4, 4), num_classes=10)
    loss_fn = spec.loss_fn()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ops = len(record_step(spec, net, x, y))
        best = float("inf")
        for _ in range(repeats + 2):  # two warm-up steps
            t0 = time.perf_counter()
            loss_fn(net(x), y).backward()
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return HostCost(best / ops, ops, METHOD.format(repeats=repeats, blocks=blocks, ops=ops))
