"""The layouts a language-model plan chooses among: what the user fixed, and every layout
those choices leave on the cluster.

:class:`Choices` holds what the command line (or the workload file) fixed; ``None`` is
searched. :func:`check_choices` turns a fixed choice the model or the cluster cannot take
into one line. :func:`layouts` yields every :class:`~scalelab.parallel.ParallelLayout`
with

- ``tp`` dividing the attention heads, the key/value heads and the MLP width, and the GPUs
  (tensor parallelism across nodes is included: its collectives then cross the NIC);
- ``cp`` splitting the sequence into ``2 cp`` equal chunks (load-balanced causal attention)
  of at least :data:`MIN_CP_CHUNK` tokens each;
- ``pp`` dividing what is left of the GPUs, at most the layers;
- ``dp = G / (tp pp cp)`` data-parallel ranks, which must divide the global batch G;
- a micro-batch ``m`` dividing the sequences per rank ``G / dp``, and ``K = G / (dp m)``
  micro-batches per step (the accumulation, which a pipeline also runs as its micro-batches:
  at least ``pp`` of them for 1F1B, a multiple of ``pp`` interleaved);
- every ZeRO level (one when ``dp = 1``), every recomputation, sequence parallelism where
  ``tp > 1``, and with a pipeline the GPipe, 1F1B and interleaved schedules (virtual stages
  :data:`VPP_CHOICES`, ``pp x vpp`` at most the layers).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

from scalelab.errors import UsageError
from scalelab.parallel import LAYOUT_LEVELS, PRECISIONS, RECOMPUTE, SCHEDULES, ParallelLayout

#: shortest sequence chunk context parallelism splits a sequence into (tokens): below it
#: each rank's attention block is too small to pay for its ring exchange (Llama 3 used
#: cp 16 at 131,072 tokens: 4,096-token chunks, Dubey et al. 2024, section 3.3.2)
MIN_CP_CHUNK = 512
#: virtual stages per pipeline rank the interleaved schedule is searched with
VPP_CHOICES = (2, 4)
#: the largest micro-batch searched, in tokens (m x s): beyond it nothing gets faster on a
#: GPU and the activations only grow
MAX_MICRO_TOKENS = 2**17


@dataclass(frozen=True)
class Choices:
    """What the user fixed (None: searched)."""

    tp: int | None = None
    pp: int | None = None
    vpp: int | None = None
    cp: int | None = None
    schedule: str | None = None
    sequence_parallel: bool | None = None
    micro_batch: int | None = None
    accumulation: int | None = None
    layout: str | None = None
    recompute: str | None = None
    precision: str | None = None

    def __post_init__(self):
        for key in ("tp", "pp", "vpp", "cp", "micro_batch", "accumulation"):
            v = getattr(self, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise UsageError(f"--{key.replace('_', '-')} must be an integer >= 1, "
                                 f"got {v!r}")
        for key, allowed in (("schedule", SCHEDULES), ("recompute", RECOMPUTE),
                             ("precision", PRECISIONS), ("layout", tuple(LAYOUT_LEVELS))):
            v = getattr(self, key)
            if v is not None and v not in allowed:
                raise UsageError(f"unknown {key} {v!r} ({', '.join(allowed)})")

    def fixed(self) -> dict:
        """The choices given, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    def all_fixed(self) -> bool:
        """Every degree and choice given: the plan evaluates that one configuration."""
        f = self.fixed()
        need = {"tp", "pp", "cp", "micro_batch", "layout", "recompute", "precision"}
        pipeline = self.pp is not None and self.pp > 1
        if pipeline:
            need |= {"schedule"}
        if self.tp is not None and self.tp > 1:
            need |= {"sequence_parallel"}
        return need <= set(f)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def tp_options(cfg, gpus: int) -> list[int]:
    """Tensor degrees the model's shape and the GPUs allow."""
    return [t for t in _divisors(gpus)
            if cfg.heads % t == 0 and cfg.kv_heads % t == 0 and cfg.ffn % t == 0]


def cp_options(seq_len: int, gpus: int) -> list[int]:
    """Context degrees: 1, and those splitting the sequence in 2 cp chunks of at least
    :data:`MIN_CP_CHUNK` tokens."""
    return [c for c in _divisors(gpus)
            if c == 1 or (seq_len % (2 * c) == 0 and seq_len // (2 * c) >= MIN_CP_CHUNK)]


def check_choices(cfg, seq_len: int, global_batch: int, gpus: int, ch: Choices) -> None:
    """One line for a fixed choice the model, the sequence or the cluster cannot take."""
    name = cfg.name
    if ch.tp is not None and (cfg.heads % ch.tp or cfg.kv_heads % ch.tp):
        raise UsageError(f"--tp {ch.tp} does not divide {name}'s {cfg.heads} attention heads "
                         f"and {cfg.kv_heads} key/value heads (tensor parallelism splits "
                         f"whole heads; possible: {_listing(tp_options(cfg, 1 << 30))})")
    if ch.tp is not None and cfg.ffn % ch.tp:
        raise UsageError(f"--tp {ch.tp} does not divide {name}'s MLP width {cfg.ffn}")
    if ch.pp is not None and ch.pp > cfg.layers:
        raise UsageError(f"--pp {ch.pp} is more pipeline stages than {name}'s "
                         f"{cfg.layers} layers")
    if ch.vpp is not None and ch.vpp > 1 and ch.schedule not in (None, "interleaved"):
        raise UsageError(f"--vpp {ch.vpp} needs the interleaved schedule, not "
                         f"--schedule {ch.schedule}")
    if ch.vpp is not None and ch.pp is not None and ch.pp * ch.vpp > cfg.layers:
        raise UsageError(f"--pp {ch.pp} x --vpp {ch.vpp} = {ch.pp * ch.vpp} stages is more "
                         f"than {name}'s {cfg.layers} layers")
    if ch.schedule == "interleaved" and ch.pp == 1:
        raise UsageError("--schedule interleaved needs a pipeline (--pp > 1)")
    if ch.sequence_parallel and ch.tp == 1:
        raise UsageError("--sequence-parallel splits the sequence over the tensor ranks: it "
                         "needs --tp > 1")
    if ch.cp is not None and ch.cp > 1 and seq_len % (2 * ch.cp):
        raise UsageError(f"--cp {ch.cp} splits each sequence into {2 * ch.cp} equal chunks "
                         f"(load-balanced causal attention): --seq-len {seq_len} is not "
                         f"divisible by {2 * ch.cp}")
    _check_product(gpus, global_batch, ch)
    if ch.pp is not None and ch.pp > 1 and ch.accumulation is not None:
        if ch.schedule != "gpipe" and ch.accumulation < ch.pp:
            raise UsageError(f"a {ch.schedule or '1f1b'} pipeline of {ch.pp} stages needs at "
                             f"least {ch.pp} micro-batches per step, got "
                             f"--accumulation-steps {ch.accumulation}")
        if ch.schedule == "interleaved" and ch.accumulation % ch.pp:
            raise UsageError(f"the interleaved schedule needs micro-batches per step "
                             f"({ch.accumulation}) divisible by --pp {ch.pp}")


def _check_product(gpus: int, global_batch: int, ch: Choices) -> None:
    split = 1
    given = []
    for key in ("tp", "pp", "cp"):
        v = getattr(ch, key)
        if v is not None:
            split *= v
            given.append(f"--{key} {v}")
    if gpus % split:
        raise UsageError(f"{' x '.join(given)} = {split} does not divide the cluster's "
                         f"{gpus} GPUs (tp x pp x cp x dp must be the GPUs)")
    if ch.tp is not None and ch.pp is not None and ch.cp is not None:
        dp = gpus // split
        if global_batch % dp:
            raise UsageError(f"{' x '.join(given)} leaves dp {dp} data-parallel ranks, which "
                             f"do not divide the global batch of {global_batch} sequences")
        per_rank = global_batch // dp
        if ch.micro_batch is not None and ch.accumulation is not None \
                and ch.micro_batch * ch.accumulation != per_rank:
            raise UsageError(f"--micro-batch {ch.micro_batch} x --accumulation-steps "
                             f"{ch.accumulation} = {ch.micro_batch * ch.accumulation} "
                             f"sequences per rank, but the global batch {global_batch} over "
                             f"dp {dp} is {per_rank}")
        if ch.micro_batch is not None and per_rank % ch.micro_batch:
            raise UsageError(f"--micro-batch {ch.micro_batch} does not divide the "
                             f"{per_rank} sequences per data-parallel rank (global batch "
                             f"{global_batch} / dp {dp})")


def _listing(values) -> str:
    return ", ".join(str(v) for v in values)


def _pick(fixed, options):
    return [fixed] if fixed is not None else options


def degrees(cfg, seq_len: int, global_batch: int, gpus: int, ch: Choices
            ) -> Iterator[tuple[int, int, int, int]]:
    """(tp, cp, pp, dp) with tp x cp x pp x dp = gpus and dp dividing the global batch."""
    for tp in _pick(ch.tp, tp_options(cfg, gpus)):
        if gpus % tp:
            continue
        for cp in _pick(ch.cp, cp_options(seq_len, gpus // tp)):
            if (gpus // tp) % cp:
                continue
            rest = gpus // (tp * cp)
            for pp in _pick(ch.pp, [p for p in _divisors(rest) if p <= cfg.layers]):
                if rest % pp:
                    continue
                dp = rest // pp
                if global_batch % dp == 0:
                    yield tp, cp, pp, dp


def micro_batches(cfg, seq_len: int, per_rank: int, ch: Choices) -> list[int]:
    """Micro-batches dividing the sequences per rank, up to :data:`MAX_MICRO_TOKENS`."""
    if ch.micro_batch is not None:
        return [ch.micro_batch] if per_rank % ch.micro_batch == 0 else []
    if ch.accumulation is not None:
        return [per_rank // ch.accumulation] if per_rank % ch.accumulation == 0 else []
    top = max(1, MAX_MICRO_TOKENS // seq_len)
    return [m for m in _divisors(per_rank) if m <= top]


def _pipeline_shapes(pp: int, layers: int, ch: Choices) -> list[tuple[str, int]]:
    """(schedule, virtual stages) pairs a pipeline of ``pp`` stages is searched with."""
    if pp == 1:
        if ch.schedule not in (None, "1f1b", "gpipe") or (ch.vpp or 1) > 1:
            return []
        return [(ch.schedule or "1f1b", 1)]
    out = []
    for sched in _pick(ch.schedule, list(SCHEDULES)):
        if sched == "interleaved":
            vpps = [ch.vpp] if ch.vpp else list(VPP_CHOICES)
            out += [(sched, v) for v in vpps if v > 1 and pp * v <= layers]
        elif (ch.vpp or 1) == 1:
            out.append((sched, 1))
    return out


def accumulation_ok(pp: int, schedule: str, accumulation: int) -> bool:
    """Whether ``accumulation`` micro-batches fill a pipeline of ``pp`` stages: 1F1B needs
    at least ``pp``, the interleaved schedule a multiple of ``pp``; GPipe takes any."""
    if pp == 1 or schedule == "gpipe":
        return True
    if accumulation < pp:
        return False
    return schedule != "interleaved" or accumulation % pp == 0


@dataclass(frozen=True)
class Family:
    """Layouts that differ only in micro-batch and recomputation."""

    base: dict
    """Every other field of the layout (ParallelLayout's keywords)."""
    per_rank: int
    """Sequences per data-parallel rank per step: micro-batch x accumulation."""
    micro_batches: tuple[int, ...]
    """The micro-batches to try, smallest first."""
    recomputes: tuple[str, ...]
    """The recomputations to try, least first."""

    def layout(self, micro_batch: int, recompute: str) -> ParallelLayout:
        return ParallelLayout(**self.base, micro_batch=micro_batch,
                              accumulation=self.per_rank // micro_batch, recompute=recompute)


def families(cfg, seq_len: int, global_batch: int, gpus: int, ch: Choices,
             precisions: tuple[str, ...]) -> Iterator[Family]:
    """Every layout the choices leave (module docstring), as :class:`Family` values: a
    search takes their micro-batches smallest first and recomputation least first, since
    activations grow with the micro-batch and recomputing more only adds FLOPs."""
    zeros = [LAYOUT_LEVELS[ch.layout]] if ch.layout else [0, 1, 2, 3]
    recomputes = tuple(_pick(ch.recompute, list(RECOMPUTE)))
    for tp, cp, pp, dp in degrees(cfg, seq_len, global_batch, gpus, ch):
        per_rank = global_batch // dp
        sps = _pick(ch.sequence_parallel, [False, True]) if tp > 1 else [False]
        mbs = micro_batches(cfg, seq_len, per_rank, ch)
        for sched, vpp in _pipeline_shapes(pp, cfg.layers, ch):
            ok = tuple(m for m in mbs if accumulation_ok(pp, sched, per_rank // m))
            if not ok:
                continue
            for zero in (zeros if dp > 1 else zeros[:1]):
                for sp in sps:
                    for prec in precisions:
                        yield Family(dict(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero,
                                          sequence_parallel=sp, schedule=sched, vpp=vpp,
                                          precision=prec), per_rank, ok, recomputes)
