"""What the user asks of a plan (beside the workload and the cluster)."""

from __future__ import annotations

from dataclasses import dataclass

from scalelab import hardware
from scalelab.errors import UsageError
from scalelab.plan.step import ARCHITECTURES, ModelParams
from scalelab.theory.band import ErrorBand

DEFAULT_MFU = 0.4
# A global batch above which convergence needs learning-rate scaling and warm-up (Goyal et al.,
# 2017): the plan warns past it, and a sharded layout does not raise the batch past it
LARGE_BATCH = 8192


@dataclass(frozen=True)
class PlanOptions:
    """Options of :func:`scalelab.plan.recommend.plan`; command line > file > these defaults."""

    target_efficiency: float = 0.8
    """alpha: the least efficiency T_C/T a recommended scale must keep, (0, 1]."""
    max_gpus: int | None = None
    """Largest device count to consider (default: the cluster's devices)."""
    architectures: tuple[str, ...] | None = None
    """Architectures to compare (default: the cluster's first, then the others)."""
    batch_size: int | None = None
    """Per-device batch (default: the profile's recommendation)."""
    loader_workers: int | None = None
    """Loader processes per device (default: as many as hide the input)."""
    params: ModelParams | None = None
    """Calibrated model parameters (default: the neutral model)."""
    default_mfu: float = DEFAULT_MFU
    """Assumed fraction of peak when the source device's peak is unknown."""
    precision: str | None = None
    """Precision the target trains in: fp32|tf32|bf16|fp16 (default: the device's default)."""
    band: ErrorBand | None = None
    """The model's measured/predicted range (a calibration's held-out errors)."""
    calibration_model: str | None = None
    """'calibrated' or 'uncalibrated' when the parameters came from a calibration file."""
    layout: str | None = None
    """Model-state layout: ddp|zero1|zero2|zero3 (default: chosen by memory and efficiency,
    :mod:`scalelab.plan.layout_choice`)."""
    global_batch: int | None = None
    """Samples per optimizer step over all devices, kept exactly: micro-batch x accumulation
    steps x data-parallel ranks (:mod:`scalelab.plan.global_batch`)."""
    recompute: str | None = None
    """Activation checkpointing per block: none|full (default: weighed by the plan)."""
    target: object = None
    """The batch and precision the plan chose for the target device
    (:class:`scalelab.plan.target.TargetChoice`); set by the plan itself."""

    def __post_init__(self):
        if not (isinstance(self.target_efficiency, (int, float))
                and 0 < self.target_efficiency <= 1):
            raise UsageError(f"target efficiency must be in (0, 1], got "
                             f"{self.target_efficiency}")
        if self.max_gpus is not None and (int(self.max_gpus) != self.max_gpus
                                          or self.max_gpus < 1):
            raise UsageError(f"max_gpus must be an integer >= 1, got {self.max_gpus}")
        if self.batch_size is not None and self.batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.loader_workers is not None and self.loader_workers < 0:
            raise UsageError(f"loader_workers must be >= 0, got {self.loader_workers}")
        if not 0 < self.default_mfu <= 1:
            raise UsageError(f"default_mfu must be in (0, 1], got {self.default_mfu}")
        if self.precision is not None and self.precision not in hardware.PRECISIONS:
            raise UsageError(f"unknown precision {self.precision!r} "
                             f"({', '.join(hardware.PRECISIONS)})")
        if self.global_batch is not None and (isinstance(self.global_batch, bool) or int(
                self.global_batch) != self.global_batch or self.global_batch < 1):
            raise UsageError(f"global_batch must be an integer >= 1, got {self.global_batch}")
        if self.recompute is not None and self.recompute not in ("none", "full"):
            raise UsageError(f"unknown recompute {self.recompute!r} (none or full)")
        if self.layout is not None and self.layout not in ("ddp", "zero1", "zero2", "zero3"):
            raise UsageError(f"unknown layout {self.layout!r} (ddp, zero1, zero2, zero3)")
        for a in self.architectures or ():
            if a not in ARCHITECTURES:
                raise UsageError(f"unknown architecture {a!r} ({', '.join(ARCHITECTURES)})")


def check_layout_architecture(options: PlanOptions, cluster) -> None:
    """A sharded layout (ZeRO-1/2/3) under parameter servers is a contradiction: one line."""
    layout = options.layout
    named = options.architectures or ((cluster.architecture,) if cluster.architecture
                                      else ())
    if layout and layout != "ddp" and named and set(named) == {"ps"}:
        raise UsageError(f"--layout {layout} shards the model state over all-reduce ranks, "
                         "while parameter servers keep it themselves (architecture ps): drop "
                         "--layout, or plan --architecture allreduce")
