"""A roofline per operation: how long a training step takes on a device it was not run on.

Derivation. An operation that does F floating-point operations and moves B bytes between
the device's memory and its cores cannot finish before either is done:

    t_op >= F / P          (P: the device's peak FLOP/s for the units that run it)
    t_op >= B / W          (W: the device's memory bandwidth, bytes/s)

(Williams, Waterman, Patterson, "Roofline: an insightful visual performance model",
CACM 52(4), 2009.) Real kernels reach only a fraction of either peak, so with achievable
fractions e_c (compute) and e_m (memory) in (0, 1]:

    t_op = max(F / (P * e_c), B / (W * e_m))

The max, not the sum, because a kernel overlaps its loads with its arithmetic; whichever
resource it exhausts first sets its time. A step runs its operations one after another on
one stream, so

    T_step = sum over ops of t_op.

Which peak P applies depends on the precision the operation runs in: matrix products and
convolutions run on tensor cores at TF32/FP16/BF16 where the device has them; element-wise
operations, normalization and pooling have no FLOPs worth counting and are bound by B / W.
The caller chooses P and B per operation (bytes halve under fp16/bf16 autocast).

The floor. Each operation is at least one kernel launch, and a GPU cannot start kernels
faster than its launch path allows: with K kernels per step and a launch costing
``launch_s``, T_step >= K * launch_s, however small the batch. This is the step floor of a
device: below it the step is bound by launches, not by the roofline, so

    T_step = max(sum of t_op, K * launch_s).

The kernels' own cost. A kernel also costs the device time its work does not explain: the
gap before it starts after the one it waits for, and the ramp-up and tail of a grid too
small to keep every multiprocessor busy. On a large GPU this adds up (the packaged fit: an
H200 in PyTorch's fp32 defaults 57 us per kernel, from its seven fp32 rows of six networks;
an RTX 3090 under AMP 7 us, from timm's 42 rows), so a device may carry a time per kernel
tau, added to the roofline:

    T_device = sum of t_op + K x tau

It is fitted only where a device's reference points hold several models (one network at
several batches cannot tell it from the fractions) and is 0 elsewhere.

The host. Every operation is issued by the host CPU (Python, the dispatcher, autograd, the
launch), which queues it and goes on while the device runs what is queued. Operation i
cannot start on the device before the host has issued it, at i x h with h the host's time
per operation, nor before the device has finished the operations before it; so the last
of N operations ends no earlier than max(N h, sum of t_op), and with the host well ahead
(the usual case) or well behind (small batches) the step is that max:

    T_step = max(T_device, N x h)

where T_device is the roofline step above. The host "sets the step" when N h is the larger.

Operation classes. Kernels of different kinds reach different fractions of the same peaks
(a depthwise convolution streams its data far below the bandwidth a batch norm reaches; a
matrix product in FP32 on CUDA cores is not a TF32 convolution). Each operation carries its
class (dense or grouped convolution, matrix product, attention, normalization,
element-wise, pooling, optimizer) and the class scales the device's fractions:

    t_op = max(F / (P * min(1, e_c k_c)), B / (W * min(1, e_m k_m)))

with (k_c, k_m) per class and precision class (1 for a class not given).

Units. The fraction e_c belongs to the units the step's main operations run on (TF32 tensor
cores for PyTorch's default convolutions on an A100 or H200, FP16/BF16 tensor cores under
autocast, the FP32 units on a V100 in fp32). An operation the framework runs on other units
(a matrix product in plain FP32 beside TF32 convolutions: ``torch.backends.cuda.matmul.
allow_tf32`` is off by default) reaches the fraction of *those* units, e_u, not e_c: an
SGEMM and a TF32 convolution are different kernels on different silicon. Such an op carries
its units' name and takes

    t_op = max(F / (P * min(1, e_u k_c)), B / (W * min(1, e_m k_m)))

with P the peak of its units (the FP32 peak) and e_u that device's fraction on them.

Assumptions: one stream (no two kernels overlap), no caching of operands across operations
(each operation reads its inputs from memory), e_c and e_m a device's at a precision, and
the class factors the same on every device (they are fitted to measured steps of many
models, so they absorb the kernels' differences on average).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class RooflineOp:
    """One operation as the roofline sees it: work, traffic and the peak of its units."""

    flops: float
    nbytes: float
    peak_flops: float  # FLOP/s of the units that run it, at its precision
    kernels: int = 1
    op_class: str = ""  # its operation class ("" : none, factors 1)
    units: str = ""  # units other than the step's that run it ("": the step's own, e_c)

    def __post_init__(self):
        if self.flops < 0 or self.nbytes < 0:
            raise ValueError(f"flops {self.flops} and bytes {self.nbytes} must be >= 0")
        if not self.peak_flops > 0:
            raise ValueError(f"peak_flops must be > 0, got {self.peak_flops}")
        if self.kernels < 0:
            raise ValueError(f"kernels must be >= 0, got {self.kernels}")


@dataclass(frozen=True)
class RooflineStep:
    step_s: float  # max(roofline_s, floor_s)
    roofline_s: float  # sum of per-op times
    compute_bound_s: float  # part of roofline_s spent in compute-bound ops
    memory_bound_s: float  # part spent in memory-bound ops
    floor_s: float  # kernels x launch_s
    kernels: int
    kernels_s: float = 0.0  # part of roofline_s that is the kernels' own cost, K x kernel_s

    @property
    def bound(self) -> str:
        if self.floor_s >= self.roofline_s:
            return "launch"
        return "compute" if self.compute_bound_s >= self.memory_bound_s else "memory"


def op_time_s(flops: float, nbytes: float, peak_flops: float, bandwidth_Bps: float,
              e_c: float, e_m: float) -> float:
    """t = max(F / (P e_c), B / (W e_m)) for one operation."""
    _check_fraction("e_c", e_c)
    _check_fraction("e_m", e_m)
    if not (peak_flops > 0 and bandwidth_Bps > 0):
        raise ValueError(f"peak_flops {peak_flops} and bandwidth_Bps {bandwidth_Bps} must be > 0")
    return max(_op_times(flops, nbytes, peak_flops, bandwidth_Bps, e_c, e_m))


def _op_times(flops: float, nbytes: float, peak_flops: float, bandwidth_Bps: float,
              e_c: float, e_m: float) -> tuple[float, float]:
    """(F / (P e_c), B / (W e_m)): one operation's compute and memory times, unchecked."""
    return flops / (peak_flops * e_c), nbytes / (bandwidth_Bps * e_m)


def step_floor_s(kernels: int, launch_s: float) -> float:
    """The step floor: K kernels cannot run in less than K launches, K * launch_s."""
    if kernels < 0 or launch_s < 0:
        raise ValueError(f"kernels {kernels} and launch_s {launch_s} must be >= 0")
    return kernels * launch_s


def host_step_s(host_ops: int, host_s_per_op: float) -> float:
    """The host's time to issue a step's operations: N x h."""
    if host_ops < 0 or host_s_per_op < 0:
        raise ValueError(f"host_ops {host_ops} and host_s_per_op {host_s_per_op} must be >= 0")
    return host_ops * host_s_per_op


def step_with_host_s(device_s: float, host_s: float) -> float:
    """T_step = max(T_device, N h): the device cannot run what the host has not issued."""
    if device_s < 0 or host_s < 0:
        raise ValueError(f"device_s {device_s} and host_s {host_s} must be >= 0")
    return max(device_s, host_s)


def roofline_step(ops: Iterable[RooflineOp], bandwidth_Bps: float, e_c: float, e_m: float,
                  launch_s: float = 0.0,
                  class_factors: Mapping[str, tuple[float, float]] | None = None,
                  unit_e_c: Mapping[str, float] | None = None,
                  kernel_s: float = 0.0) -> RooflineStep:
    """T_step = max(sum_ops max(F/(P min(1, e k_c)), B/(W min(1, e_m k_m))) + K kernel_s,
    K launch_s), with (k_c, k_m) = ``class_factors[op.op_class]`` (1, 1 when absent), e = e_c,
    or ``unit_e_c[op.units]`` for an op on other units, and ``kernel_s`` the device's own
    cost per kernel (see the module)."""
    _check_fraction("e_c", e_c)
    _check_fraction("e_m", e_m)
    factors = class_factors or {}
    units = unit_e_c or {}
    for name, value in units.items():
        _check_fraction(f"e_c of {name}", value)
    for name, (kc, km) in factors.items():
        if not (kc > 0 and km > 0):
            raise ValueError(f"class factors of {name!r} must be > 0, got {(kc, km)}")
    if not bandwidth_Bps > 0:
        raise ValueError(f"bandwidth_Bps must be > 0, got {bandwidth_Bps}")
    if kernel_s < 0:
        raise ValueError(f"kernel_s must be >= 0, got {kernel_s}")
    compute_s = memory_s = 0.0
    kernels = 0
    for op in ops:
        kc, km = factors.get(op.op_class, (1.0, 1.0))
        if op.units and op.units not in units:
            raise ValueError(f"no compute fraction given for units {op.units!r}")
        e = units[op.units] if op.units else e_c
        ec, em = min(1.0, e * kc), min(1.0, e_m * km)
        tc, tm = _op_times(op.flops, op.nbytes, op.peak_flops, bandwidth_Bps, ec, em)
        if tc >= tm and op.flops:
            compute_s += tc
        else:
            memory_s += tm
        kernels += op.kernels
    roof = compute_s + memory_s + kernels * kernel_s
    floor = step_floor_s(kernels, launch_s)
    return RooflineStep(max(roof, floor), roof, compute_s, memory_s, floor, kernels,
                        kernels * kernel_s)


def _check_fraction(name: str, value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
