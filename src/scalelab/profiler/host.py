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
operation. The tiny kernels still run on the CPU, which stands in for the launch of a
GPU's kernel.

A busy machine must not inflate it: each step is timed in the CPU time of the measuring
thread (``time.thread_time``: the time it waited for a core does not count) and the least
of ``repeats`` steps is kept, the one least disturbed by other work (caches, a shared
core). What the rest of the machine did meanwhile is stored beside it: the 1-minute load
average and the share of the cores other processes kept busy during the measurement
(from ``/proc/stat``, less this process's own CPU time); above :data:`LOADED_SHARE` the
measurement is marked ``loaded`` and a plan uses the packaged quiet figure instead
(:func:`scalelab.plan.compute.carried_host_s_per_op`).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

METHOD = ("least CPU time of the measuring thread over {repeats} forward+backward steps of "
          "{blocks} x (3x3 conv, batch norm, ReLU) on 2x4x4x4 + linear + cross entropy on the "
          "CPU, one thread, divided by its {ops} counted operations")
#: share of the machine's cores other processes kept busy above which a measurement is loaded
LOADED_SHARE = 0.25


@dataclass(frozen=True)
class HostCost:
    s_per_op: float  # host seconds per issued operation
    ops: int  # operations of the measured step
    method: str
    load_average: float | None = None  # 1-minute load average when it was measured
    others_share: float | None = None  # share of the cores other processes kept busy (0..1)
    cpus: int | None = None
    loaded: bool = False  # others kept more than LOADED_SHARE of the cores busy
    wall_s_per_op: float | None = None  # the same steps' least wall time, for comparison

    def to_dict(self) -> dict:
        return asdict(self)


def _busy_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all cores since boot, from /proc/stat (None elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def others_share(before: tuple[int, int] | None, after: tuple[int, int] | None,
                 own_cpu_s: float) -> float | None:
    """Share of the cores processes other than this one kept busy between two
    :func:`_busy_ticks` readings, given this process's CPU seconds meanwhile."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy = (after[0] - before[0]) / tick - own_cpu_s
    return min(1.0, max(0.0, busy / ((after[1] - before[1]) / tick)))


def _network(blocks: int):
    from torch import nn

    layers = []
    for _ in range(blocks):
        layers += [nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
                   nn.ReLU(inplace=True)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))


def measure_host_s_per_op(blocks: int = 32, repeats: int = 20) -> HostCost:
    """Host seconds per operation of a training step on this CPU (see the module)."""
    import torch

    from scalelab.opcount import record_step
    from scalelab.workload import WorkloadSpec

    if blocks < 1 or repeats < 1:
        raise ValueError(f"blocks {blocks} and repeats {repeats} must be >= 1")
    net = _network(blocks)
    x = torch.randn(2, 4, 4, 4)
    y = torch.zeros(2, dtype=torch.long)
    spec = WorkloadSpec(model="resnet18", input_shape=(4, 4, 4), num_classes=10)
    loss_fn = spec.loss_fn()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ops = len(record_step(spec, net, x, y))
        best, best_wall = float("inf"), float("inf")
        ticks, cpu0 = _busy_ticks(), time.process_time()
        for _ in range(repeats + 2):  # two warm-up steps
            c0, t0 = time.thread_time(), time.perf_counter()
            loss_fn(net(x), y).backward()
            best = min(best, time.thread_time() - c0)
            best_wall = min(best_wall, time.perf_counter() - t0)
        share = others_share(ticks, _busy_ticks(), time.process_time() - cpu0)
    finally:
        torch.set_num_threads(threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return HostCost(best / ops, ops, METHOD.format(repeats=repeats, blocks=blocks, ops=ops),
                    load, share, os.cpu_count(), bool(share is not None and share > LOADED_SHARE),
                    best_wall / ops)
