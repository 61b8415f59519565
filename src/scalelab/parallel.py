"""One parallel layout as one typed value: every degree and choice of a configuration.

A :class:`ParallelLayout` holds what a training configuration on many GPUs decides: the
data-parallel degree and its exchange (``ps``, ``allreduce``, ``hierarchical``), the
ZeRO/FSDP level of the model state (0 = plain DDP, 1, 2, 3), the tensor degree with or
without sequence parallelism, the pipeline degree with its schedule and virtual stages, the
context degree, the micro-batch, the micro-batches per step (gradient accumulation, which
is also a pipeline's micro-batch count), recomputation and precision. The step model, the
memory model, the search, the runners and the validation all take this one value; a
data-parallel plan is the case ``tp = pp = cp = 1``.

The degrees multiply to the GPUs: ``gpus = dp * tp * pp * cp`` (as torchtitan's
``ParallelDims`` checks against the world size), and one step trains
``global_batch = micro_batch * accumulation * dp`` sequences (or samples).
:meth:`ParallelLayout.check_model` holds the degrees against a transformer's shape.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

EXCHANGES = ("allreduce", "ps", "hierarchical")
SCHEDULES = ("1f1b", "gpipe", "interleaved")
RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
#: the ZeRO level of each layout name of :mod:`scalelab.theory.zero`
LAYOUT_LEVELS = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}


@dataclass(frozen=True)
class ParallelLayout:
    """A parallel configuration. Validated on creation (``ValueError`` with the numbers)."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    exchange: str = "allreduce"
    zero: int = 0
    sequence_parallel: bool = False
    schedule: str = "1f1b"
    vpp: int = 1
    micro_batch: int = 1
    accumulation: int = 1
    recompute: str = "none"
    precision: str = "bf16"

    def __post_init__(self):
        for key in ("dp", "tp", "pp", "cp", "vpp", "micro_batch", "accumulation"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{key} must be a positive integer, got {v!r}")
        for key, allowed in (("exchange", EXCHANGES), ("schedule", SCHEDULES),
                             ("recompute", RECOMPUTE), ("precision", PRECISIONS)):
            if getattr(self, key) not in allowed:
                raise ValueError(f"unknown {key} {getattr(self, key)!r} "
                                 f"({', '.join(allowed)})")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero must be 0 (plain DDP), 1, 2 or 3, got {self.zero!r}")
        if self.vpp > 1 and self.schedule != "interleaved":
            raise ValueError(f"{self.vpp} virtual stages need the interleaved schedule, "
                             f"not {self.schedule}")
        if self.schedule == "interleaved" and self.pp == 1:
            raise ValueError("the interleaved schedule needs a pipeline (pp > 1)")
        if self.pp > 1 and self.schedule != "gpipe" and self.accumulation < self.pp:
            raise ValueError(f"a {self.schedule} pipeline of {self.pp} stages needs at least "
                             f"{self.pp} micro-batches per step, got {self.accumulation}")
        if self.schedule == "interleaved" and self.accumulation % self.pp:
            raise ValueError(f"the interleaved schedule needs micro-batches per step "
                             f"({self.accumulation}) divisible by the pipeline degree "
                             f"{self.pp}")
        if self.zero and self.exchange == "ps":
            raise ValueError(f"ZeRO-{self.zero} shards the model state over an all-reduce "
                             "group; a parameter server keeps it whole (use exchange "
                             "allreduce, or zero 0)")

    # -- derived -------------------------------------------------------------------------
    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def global_batch(self) -> int:
        """Sequences (or samples) in one optimizer step over the whole cluster."""
        return self.micro_batch * self.accumulation * self.dp

    @property
    def layout(self) -> str:
        """The model-state layout's name: ddp, zero1, zero2 or zero3."""
        return ("ddp", "zero1", "zero2", "zero3")[self.zero]

    @property
    def data_parallel_only(self) -> bool:
        return self.tp == self.pp == self.cp == 1

    def check_world(self, world_size: int) -> None:
        """``ValueError`` unless the degrees multiply to ``world_size``."""
        if self.gpus != world_size:
            raise ValueError(f"dp {self.dp} x tp {self.tp} x pp {self.pp} x cp {self.cp} = "
                             f"{self.gpus} GPUs, not the {world_size} there are")

    def check_model(self, cfg) -> None:
        """``ValueError`` unless the degrees divide a transformer's shape: tp divides the
        attention heads and the key/value heads, pp x vpp stages are no more than the
        layers, cp splits the sequence in 2 cp chunks (load-balanced causal attention)."""
        if cfg.heads % self.tp or cfg.kv_heads % self.tp:
            raise ValueError(f"tensor degree {self.tp} does not divide {cfg.name}'s "
                             f"{cfg.heads} attention heads and {cfg.kv_heads} key/value heads")
        if self.pp * self.vpp > cfg.layers:
            raise ValueError(f"{self.pp} pipeline stages x {self.vpp} virtual stages = "
                             f"{self.pp * self.vpp} is more than {cfg.name}'s "
                             f"{cfg.layers} layers")
        if self.tp > 1 and cfg.ffn % self.tp:
            raise ValueError(f"tensor degree {self.tp} does not divide {cfg.name}'s MLP "
                             f"width {cfg.ffn}")

    def describe(self) -> str:
        """'dp 8 x tp 8 x pp 2 (1f1b, m=16), zero1, mb 1, recompute selective, bf16'."""
        parts = [f"dp {self.dp}"]
        if self.tp > 1:
            parts.append(f"tp {self.tp}" + (" +sp" if self.sequence_parallel else ""))
        if self.pp > 1:
            sched = self.schedule + (f" v={self.vpp}" if self.vpp > 1 else "")
            parts.append(f"pp {self.pp} ({sched}, m={self.accumulation})")
        if self.cp > 1:
            parts.append(f"cp {self.cp}")
        return (" x ".join(parts) + f", {self.layout}, micro-batch {self.micro_batch}, "
                f"recompute {self.recompute}, {self.precision}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(gpus=self.gpus, global_batch=self.global_batch, layout=self.layout)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ParallelLayout:
        keys = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in keys})
