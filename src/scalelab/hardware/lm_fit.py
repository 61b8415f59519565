"""The fitted compute factors of the language-model step model (``lm_fit.json``).

A *stack* is how a framework runs a transformer: ``pytorch`` (PyTorch FSDP with a fused
attention kernel and autocast's fp32 master weights; fitted on MosaicML llm-foundry's A100
rows) and ``megatron`` (Megatron-LM's tensor and pipeline parallelism with its unfused
softmax and fp16 mixed precision; fitted on vTrain's single-node A100 rows). Each stack's
:class:`Efficiency` was fitted on one GPU generation (the A100); on another device the
same fractions of *that* device's peaks are used, and the step says so.

The file is written by ``python -m scalelab.plan.lm.fit`` (which records the digest of the
data it fitted) and read once per process here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

FIT_FILE = "lm_fit.json"


@dataclass(frozen=True)
class Efficiency:
    """Fractions of the device's peaks each operation class reaches, and fixed times."""

    matmul: float = 0.62        # of the dense tensor peak at the precision
    attention: float = 0.45     # fused attention's FLOPs, of the same peak
    memory: float = 0.70        # of the memory bandwidth (norms, element-wise, softmax, loss)
    layer_s: float = 0.0        # the host's time to issue one layer's pass (launches)
    comm: float = 0.80          # of a link's bandwidth a collective reaches
    overlap: float = 1.0        # of the data-parallel exchange hidden behind backward
    step_s: float = 0.0         # fixed time per optimizer step (the framework's own)
    collective_s: float = 0.0   # per latency-bound step of a tensor-parallel ring
    p2p_s: float = 0.0          # per micro-batch a pipeline stage spends in its blocking
                                # sends and receives beyond their bytes
    pass_s: float = 0.0         # the device's fixed time per layer pass beyond the
                                # roofline (its kernels' launch latency and tails)

    def __post_init__(self):
        for k in ("matmul", "attention", "memory", "comm", "overlap"):
            v = getattr(self, k)
            if not 0.0 < v <= 1.0 and not (k == "overlap" and v == 0.0):
                raise ValueError(f"efficiency {k} must be in (0, 1], got {v!r}")
        for k in ("layer_s", "step_s", "collective_s", "p2p_s", "pass_s"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)!r}")

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class StackFit:
    """One stack's fitted factors, the band of its held-out errors and where they came
    from."""

    stack: str
    efficiency: Efficiency
    band: tuple[float, float]
    fitted_on: str
    source: str


#: used where no fit file is packaged (and before the first fit): round figures, band wide
DEFAULT = StackFit("default", Efficiency(), (-0.3, 0.3), "none", "round figures, not fitted")


@lru_cache(maxsize=1)
def packaged() -> dict[str, StackFit]:
    """{stack: StackFit} of the packaged file; {} when there is none."""
    try:
        text = resources.files(__package__).joinpath(FIT_FILE).read_text()
    except FileNotFoundError:
        return {}
    data = json.loads(text)
    return {name: StackFit(name, Efficiency(**d["efficiency"]), tuple(d["band"]),
                           d["fitted_on"], d["source"])
            for name, d in data["stacks"].items()}


def stack_fit(stack: str) -> StackFit:
    """The packaged fit of ``stack`` (or :data:`DEFAULT` when none is packaged)."""
    fits = packaged()
    if stack in fits:
        return fits[stack]
    if not fits:
        return DEFAULT
    raise ValueError(f"unknown stack {stack!r} ({', '.join(fits)})")


def digest() -> str | None:
    """The data digest the packaged fit records."""
    try:
        text = resources.files(__package__).joinpath(FIT_FILE).read_text()
    except FileNotFoundError:
        return None
    return json.loads(text).get("data_digest")
