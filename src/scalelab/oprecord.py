"""A training step's counted operations as records, without torch: what
:mod:`scalelab.opcount` returns and what the plan reads from its cache."""

from __future__ import annotations

from dataclasses import dataclass

from scalelab.opclasses import AUTOCAST_FP32_OPS, OP_CLASSES

PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class OpCost:
    """One operation of a training step."""

    name: str
    phase: str
    flops: float
    bytes_fp32: float  # inputs + outputs at 4 bytes per element
    tensor_core: bool
    kernels: int = 1
    op_class: str = "elementwise"  # one of OP_CLASSES: which kernels run it

    def __post_init__(self):
        if self.op_class not in OP_CLASSES:
            raise ValueError(f"op_class must be one of {OP_CLASSES}, got {self.op_class!r}")
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {self.phase!r}")
        if self.flops < 0 or self.bytes_fp32 < 0 or self.kernels < 0:
            raise ValueError(f"op {self.name}: flops {self.flops}, bytes {self.bytes_fp32}, "
                             f"kernels {self.kernels} must be >= 0")


@dataclass(frozen=True)
class StepOps:
    """All operations of one training step of ``model`` at ``batch_size``."""

    model: str
    input_shape: tuple[int, ...]
    num_classes: int
    optimizer: str
    batch_size: int
    param_count: int
    ops: tuple[OpCost, ...]
    cast_weights: int = 0  # parameter tensors autocast casts to fp16/bf16 (conv, linear)
    channels_last: bool = False
    """The model and its batches in channels_last (NHWC) memory format: the configuration's,
    set where it is known (the counting is the same either way)."""

    @property
    def flops(self) -> float:
        return sum(o.flops for o in self.ops)

    @property
    def bytes_fp32(self) -> float:
        return sum(o.bytes_fp32 for o in self.ops)

    @property
    def kernels(self) -> int:
        return sum(o.kernels for o in self.ops)

    def phase_flops(self, phase: str) -> float:
        return sum(o.flops for o in self.ops if o.phase == phase)

    def host_ops(self, precision: str = "fp32") -> int:
        """Operations the host issues in one step: one per counted operation of forward and
        backward, one per kernel of the optimizer's passes, and under fp16/bf16 autocast
        the casts it adds, each with its backward: one per weight of a convolution or
        linear layer and two per operation autocast keeps in fp32 (its half input cast
        up, its output cast down for the next half-precision operation)."""
        n = sum(1 if o.phase != "optimizer" else o.kernels for o in self.ops)
        if precision in ("fp16", "bf16"):
            fp32_ops = sum(1 for o in self.ops
                           if o.phase == "forward" and o.name in AUTOCAST_FP32_OPS)
            n += 2 * (self.cast_weights + 2 * fp32_ops)
        return n
