"""The configuration of a tensor-, pipeline- or sharded x tensor-parallel training run.

:class:`ParallelRunConfig` is what every rank of such a run receives: the transformer
(:class:`~scalelab.models.config.TransformerConfig`), its
:class:`~scalelab.parallel.ParallelLayout` (whose ``accumulation`` is the micro-batches
per step: the pipeline's micro-batches, or gradient accumulation without a pipeline), the
sequence length, the optimizer, steps and checkpoints. Validated on creation: every bad
input is one line (:class:`~scalelab.errors.UsageError`, exit 2) before any rank starts.

A step trains ``global_batch = micro_batch x accumulation x dp`` sequences of ``seq_len``
tokens (the loss predicts tokens 1.. from the logits of tokens ..-1). The data are synthetic
and depend only on the seed and the step (:func:`synthetic_batch`), so a run of any layout
sees the same batches as one process, and a resumed run the same as an uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from scalelab.errors import UsageError
from scalelab.models.config import TransformerConfig
from scalelab.parallel import ParallelLayout
from scalelab.runner.config import check_timeout_s

DEVICES = ("cpu", "cuda")
OPTIMIZERS = ("sgd", "adam", "adamw")


@dataclass(frozen=True)
class ParallelRunConfig:
    """One run of a transformer on a parallel layout (tp > 1 or pp > 1, or FSDP x TP)."""

    model: TransformerConfig
    layout: ParallelLayout
    seq_len: int = 32
    steps: int = 10
    warmup_steps: int = 2
    fsdp: bool = False  # FSDP2 (fully_shard) over the mesh's dp dimension
    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    seed: int = 0
    timeout_s: float = 60.0
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    resume: bool = False
    device: str = "cpu"
    threads: int | None = None
    final_params_path: str | None = None
    emulate_network: str | None = None
    """Each rank on a host of its own, the hosts' links shaped to this rate
    (:mod:`scalelab.netem`; root and network namespaces; CPU ranks over Gloo)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.model, TransformerConfig):
            raise UsageError("model must be a TransformerConfig")
        if not isinstance(self.layout, ParallelLayout):
            raise UsageError("layout must be a ParallelLayout")
        lay, m = self.layout, self.model
        try:
            lay.check_model(m)
            from scalelab.runner.pipeline_parallel import check_tied

            check_tied(m, lay.pp)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if self.device not in DEVICES:
            raise UsageError(f"unknown device {self.device!r} (cpu or cuda)")
        if lay.cp > 1 and self.device == "cpu":
            raise UsageError(f"--cp {lay.cp}: context parallelism does not run on the CPU "
                             "(PyTorch has no sharding rule for its CPU attention kernel); "
                             "run it with --device cuda")
        if lay.cp > 1:
            raise UsageError(f"--cp {lay.cp}: context parallelism is planned, not run: "
                             "this runner trains tp, pp and dp layouts")
        if lay.exchange != "allreduce":
            raise UsageError(f"a {lay.exchange} exchange is not built for tensor or pipeline "
                             "layouts: their data-parallel part all-reduces (or shards "
                             "with --architecture fsdp)")
        from scalelab.runner.parallel_compute import check_precision

        check_precision(lay.precision, self.device)
        if self.fsdp and lay.dp == 1:
            raise UsageError("--architecture fsdp shards over the data-parallel ranks: with "
                             f"tp {lay.tp} x pp {lay.pp} there is one (use more workers)")
        if self.fsdp and lay.zero == 1:
            raise UsageError("--zero 1 (optimizer state sharded alone) is not built for tensor "
                             "or pipeline layouts: FSDP2 shards gradients too (--zero 2) or "
                             "parameters as well (--zero 3)")
        if lay.zero and not self.fsdp:
            raise UsageError(f"ZeRO-{lay.zero} shards over the data-parallel ranks: it needs "
                             "--architecture fsdp")
        if self.fsdp and lay.pp > 1:
            raise UsageError("--architecture fsdp with a pipeline is not built (FSDP2 over "
                             "tensor parallelism is: use --pp 1)")
        if not 2 <= self.seq_len <= m.max_seq:
            raise UsageError(f"--seq-len must be between 2 and {m.name}'s {m.max_seq} "
                             f"positions, got {self.seq_len}")
        if self.seq_len % lay.tp and lay.sequence_parallel:
            raise UsageError(f"sequence parallelism splits the {self.seq_len} tokens of a "
                             f"sequence over tp {lay.tp}: --seq-len must be a multiple of it")
        if self.optimizer not in OPTIMIZERS:
            raise UsageError(f"unknown optimizer {self.optimizer!r} (sgd, adam or adamw)")
        if not 0 < self.lr < float("inf"):
            raise UsageError(f"--lr must be > 0 and finite, got {self.lr}")
        if self.steps < 1:
            raise UsageError(f"--steps must be >= 1, got {self.steps}")
        if self.warmup_steps < 0:
            raise UsageError(f"warm-up steps must be >= 0, got {self.warmup_steps}")
        check_timeout_s(self.timeout_s)
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise UsageError(f"--checkpoint-every must be >= 1, got {self.checkpoint_every}")
        if (self.checkpoint_every is not None or self.resume) and not self.checkpoint_dir:
            raise UsageError("--checkpoint-every and --resume need --checkpoint-dir")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"threads must be >= 1, got {self.threads}")
        if self.emulate_network is not None:
            from scalelab import netem

            if self.device != "cpu":
                raise UsageError("--emulate-network with a tensor or pipeline layout trains on "
                                 "the CPU (Gloo): use --device cpu")
            netem.parse_rate(self.emulate_network)   # a bad rate is one line

    @property
    def world_size(self) -> int:
        return self.layout.gpus

    @property
    def warmup_used(self) -> int:
        """Warm-up steps left out of the medians (all but the last, in a short run)."""
        return min(self.warmup_steps, max(self.steps - 1, 0))

    @property
    def architecture(self) -> str:
        return "fsdp" if self.fsdp else "allreduce"

    def identity(self) -> dict:
        """What a checkpoint must agree with to be resumed (the layout may differ: the
        checkpoint holds whole tensors' shards, which DCP reshards)."""
        return {"model": self.model.to_dict(), "seq_len": self.seq_len,
                "optimizer": self.optimizer, "lr": self.lr, "momentum": self.momentum,
                "seed": self.seed, "global_batch": self.layout.global_batch}

    def describe_rank(self, rank: int) -> str:
        from scalelab.runner.mesh import coords_of

        c = coords_of(self.layout, rank)
        return f"rank {rank} (pp {c.pp}, dp {c.dp}, tp {c.tp})"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model.to_dict(), "layout": self.layout.to_dict(),
                "seq_len": self.seq_len, "steps": self.steps,
                "warmup_steps": self.warmup_steps, "fsdp": self.fsdp,
                "architecture": self.architecture, "optimizer": self.optimizer,
                "lr": self.lr, "momentum": self.momentum, "seed": self.seed,
                "timeout_s": self.timeout_s, "checkpoint_dir": self.checkpoint_dir,
                "checkpoint_every": self.checkpoint_every, "resume": self.resume,
                "device": self.device, "threads": self.threads,
                "final_params_path": self.final_params_path,
                "emulate_network": self.emulate_network, "extra": self.extra,
                "workers": self.world_size, "tp": self.layout.tp, "pp": self.layout.pp,
                "vpp": self.layout.vpp, "dp": self.layout.dp,
                "schedule": self.layout.schedule if self.layout.pp > 1 else None,
                "sequence_parallel": self.layout.sequence_parallel,
                "micro_batch": self.layout.micro_batch,
                "accumulation": self.layout.accumulation}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ParallelRunConfig:
        keys = set(cls.__dataclass_fields__) - {"model", "layout"}
        kw = {k: v for k, v in d.items() if k in keys}
        return cls(model=TransformerConfig.from_dict(d["model"]),
                   layout=ParallelLayout.from_dict(d["layout"]), **kw)

    def with_(self, **changes) -> ParallelRunConfig:
        return replace(self, **changes)


def synthetic_batch(cfg: ParallelRunConfig, step: int):
    """The step's global batch of token ids, ``(global_batch, seq_len)``: the same in
    every process for a seed and step (torch's CPU generator, seeded by both)."""
    import torch

    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    return torch.randint(cfg.model.vocab, (cfg.layout.global_batch, cfg.seq_len),
                         generator=g)
