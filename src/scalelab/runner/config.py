"""The run configuration: one validated dataclass that every rank receives.

Ranks and roles. Parameter-server jobs have ``workers + ps`` ranks. Without ``colocate``
ranks ``0..W-1`` are workers and ``W..W+P-1`` servers; with ``colocate`` and a server on
every worker host (P = W) ranks alternate worker, server, worker, server..., so that
torchrun's node-major rank assignment with an even ``--nproc-per-node`` puts server k
beside worker k. With ``colocate`` and another count (the local launcher), ranks are laid
out as without it and server k runs on worker host ``k mod W``: ``floor(P/W)`` servers on
every host and one more on the first ``P mod W``, as the plan places them
(:func:`scalelab.theory.topology.servers_per_node`).
All-reduce jobs have ``workers`` ranks, all workers. Rank 0 is always worker 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from scalelab.errors import UsageError
from scalelab.runner.devices import check_device, default_device
from scalelab.theory.comm import PIPELINED, PUSH_THEN_PULL
from scalelab.workload import WorkloadSpec

ARCHITECTURES = ("ps", "allreduce", "fsdp")
SHARD_LEVELS = (1, 2, 3)
MODES = ("sync", "async")
PARTITIONS = ("balanced", "tensor")
LAUNCHERS = ("local", "torchrun")
#: How a parameter server's pieces travel: Gloo point-to-point (TCP, loopback or a real
#: link), or shared memory between ranks of one host (:mod:`scalelab.runner.shm`); "auto":
#: shared memory where every rank is a process of this host, else TCP.
TRANSPORTS = ("tcp", "shm", "auto")
#: Activation checkpointing (``--recompute``): none, or every block's forward recomputed in
#: backward (:mod:`scalelab.runner.recompute`).
RECOMPUTE = ("none", "full")

#: The asynchronous parameter server's exchange: one message per shard, applied by the
#: server on arrival and answered to that worker alone (no common step, no pipelining).
ASYNC_EXCHANGE = "asynchronous (one message per shard, applied on arrival)"
#: DDP's exchange: bucketed ring all-reduce launched from backward hooks.
ALLREDUCE_EXCHANGE = "ring all-reduce (DDP buckets, overlapping backward)"
#: One all-reduce worker: nothing to exchange, and the plain module trains (no DDP wrapper).
ONE_WORKER_EXCHANGE = "none: one worker (an all-reduce of one rank is the identity; no DDP)"
#: The sharded exchanges (``--architecture fsdp``), by ZeRO level (:mod:`scalelab.runner.fsdp`).
FSDP_EXCHANGE = {
    1: "ZeRO-1: DDP all-reduce, then each owner broadcasts its updated parameters",
    2: "ZeRO-2: FSDP2 all-gather once per unit, reduce-scatter of gradients",
    3: "ZeRO-3: FSDP2 all-gather per unit in forward and backward, reduce-scatter of gradients",
}


def _check_algorithm(cfg) -> None:
    """The computation configuration must parse and make sense for the run."""
    from scalelab.algorithm_names import parse

    opts = parse(cfg.algorithm)  # UsageError for an unknown option or a contradiction
    if "fp16_autocast" in opts and cfg.architecture == "ps":
        raise UsageError(
            f"--algorithm {cfg.algorithm}: fp16 trains through loss scaling, which needs the "
            "optimizer beside the gradients; parameter servers apply the workers' gradients "
            "(use bf16_autocast, or --architecture allreduce)")
    if "fp16_autocast" in opts and cfg.architecture == "fsdp":
        raise UsageError(f"--algorithm {cfg.algorithm}: fp16 loss scaling is not built "
                         "for --architecture fsdp (use bf16_autocast)")


def _resolve_transport(cfg) -> str:
    """``tcp`` or ``shm`` for ``cfg.transport`` (auto: shm where it can carry the pieces)."""
    if cfg.transport not in TRANSPORTS:
        raise UsageError(f"unknown transport {cfg.transport!r} (tcp, shm or auto)")
    why = cfg.shm_refusal
    if cfg.transport == "shm" and why:
        raise UsageError(f"--transport shm: {why}")
    if cfg.transport == "auto":
        return "tcp" if why else "shm"
    return cfg.transport


def _check_memory_choices(cfg) -> None:
    """--accumulation-steps, --recompute, and --piece-size only for parameter servers (the
    command line refuses an explicit --partition likewise: a validation grid crosses the
    partition with every architecture, so the value alone cannot tell)."""
    k = cfg.accumulation_steps
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UsageError(f"--accumulation-steps must be an integer >= 1, got {k!r}")
    if k > 1 and cfg.architecture == "ps" and cfg.mode == "async":
        raise UsageError("--accumulation-steps needs --mode sync: an asynchronous server applies "
                         "each worker's gradient on arrival, there is no common step to "
                         "accumulate to (use --batch-size for a larger batch per update)")
    if cfg.recompute not in RECOMPUTE:
        raise UsageError(f"unknown --recompute {cfg.recompute!r} (none or full)")
    if cfg.architecture != "ps" and cfg.piece_bytes is not None:
        raise UsageError(f"--piece-size cuts parameter-server shards into messages: it has "
                         f"no meaning with --architecture {cfg.architecture} (drop it, or "
                         "use --architecture ps)")


MAX_TIMEOUT_S = 1e9
"""The longest --timeout taken (about 31 years): the collectives take it as a timedelta,
and infinity is none."""


def check_timeout_s(timeout_s: float) -> None:
    """A --timeout of run, validate or compare: > 0 seconds, finite."""
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise UsageError(f"--timeout must be > 0 and at most {MAX_TIMEOUT_S:g} seconds, "
                         f"got {timeout_s}")


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines one distributed training run."""

    workload: WorkloadSpec
    workers: int = 2
    ps: int | None = None
    architecture: str = "ps"
    mode: str = "sync"
    batch_size: int = 32
    steps: int = 20
    warmup_steps: int = 2
    partition: str = "balanced"
    piece_bytes: int | None = None
    colocate: bool = False
    emulate_network: str | None = None
    timeout_s: float = 60.0
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    resume: bool = False
    seed: int = 0
    data: str | None = None
    loader_workers: int = 2
    launcher: str = "local"
    threads: int | None = None
    device: str | None = None  # "cpu" or "cuda"; None: cuda when torch sees a GPU, else cpu
    stage_host: bool | None = None  # PS workers stage the exchange through host buffers;
    # None: when the device is cuda (True on the CPU runs the same staging code, for tests)
    final_params_path: str | None = None
    algorithm: str = "default"  # the profile's computation configuration, e.g.
    # "channels_last+bf16_autocast" (scalelab.profiler.algorithms): what every worker trains in
    shard_level: int = 3  # --architecture fsdp: ZeRO level (1, 2, 3)
    transport: str = "tcp"  # parameter-server pieces: tcp, shm or auto (TRANSPORTS); stored
    # resolved, so run.json says which one carried the bytes
    accumulation_steps: int = 1  # micro-batches of batch_size per exchange (gradient
    # accumulation): a worker contributes batch_size x accumulation_steps samples per step
    recompute: str = "none"  # RECOMPUTE: activation checkpointing per block
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.workload, WorkloadSpec):
            raise UsageError("workload must be a WorkloadSpec")
        if self.architecture not in ARCHITECTURES:
            raise UsageError(
                f"unknown architecture {self.architecture!r} (ps, allreduce or fsdp)")
        if self.shard_level not in SHARD_LEVELS:
            raise UsageError(f"--zero must be 1, 2 or 3, got {self.shard_level}")
        if self.mode not in MODES:
            raise UsageError(f"unknown mode {self.mode!r} (sync or async)")
        if self.partition not in PARTITIONS:
            raise UsageError(f"unknown partition {self.partition!r} (balanced or tensor)")
        if self.launcher not in LAUNCHERS:
            raise UsageError(f"unknown launcher {self.launcher!r} (local or torchrun)")
        if self.workers < 1:
            raise UsageError(f"--workers must be >= 1, got {self.workers}")
        ps = self.ps
        if self.architecture == "ps":
            if ps is None:
                ps = self.workers if self.colocate else 1
            if ps < 1:
                raise UsageError(
                    f"--ps must be >= 1 with the parameter-server architecture, got {ps}")
            if self.colocate and ps != self.workers and self.launcher == "torchrun":
                raise UsageError(
                    f"--ps-placement colocated under torchrun puts one server beside every "
                    f"worker: --ps must equal --workers ({self.workers}), got {ps} (another "
                    f"count runs with the local launcher)")
        else:
            if ps not in (None, 0):
                raise UsageError(
                    f"--ps {ps} makes no sense with --architecture {self.architecture}")
            if self.mode != "sync":
                raise UsageError("--mode async needs --architecture ps (all-reduce and sharded "
                                 "data parallelism are synchronous)")
            if self.colocate:
                raise UsageError("--colocate needs --architecture ps")
            ps = 0
        object.__setattr__(self, "ps", ps)
        if self.batch_size < 1:
            raise UsageError(f"--batch-size must be >= 1, got {self.batch_size}")
        _check_memory_choices(self)
        if self.steps < 1:
            raise UsageError(f"--steps must be >= 1, got {self.steps}")
        if self.warmup_steps < 0:
            raise UsageError(f"warmup steps must be >= 0, got {self.warmup_steps}")
        if self.piece_bytes is not None and self.piece_bytes < 4:
            raise UsageError(f"piece size must be >= 4 bytes, got {self.piece_bytes}")
        check_timeout_s(self.timeout_s)
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise UsageError(f"--checkpoint-every must be >= 1, got {self.checkpoint_every}")
        if (self.checkpoint_every is not None or self.resume) and not self.checkpoint_dir:
            raise UsageError("--checkpoint-every and --resume need --checkpoint-dir")
        if self.checkpoint_dir and self.architecture == "ps" and self.mode == "async":
            raise UsageError(
                "checkpoints need --mode sync (asynchronous servers have no common step)"
            )
        if self.loader_workers < 0:
            raise UsageError(f"--loader-workers must be >= 0, got {self.loader_workers}")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"threads must be >= 1, got {self.threads}")
        object.__setattr__(self, "device", check_device(self.device or default_device()))
        _check_algorithm(self)
        if self.stage_host is None:
            object.__setattr__(self, "stage_host", self.device == "cuda")
        if self.device == "cuda" and not self.stage_host and self.architecture == "ps":
            raise UsageError("parameter-server workers on cuda send over Gloo from host "
                             "memory: stage_host cannot be False with --device cuda")
        object.__setattr__(self, "transport", _resolve_transport(self))

    @property
    def shm_refusal(self) -> str | None:
        """Why shared memory cannot carry this run's pieces (None: it can)."""
        if self.architecture != "ps":
            return "it carries parameter-server pieces (--architecture ps)"
        if self.mode != "sync":
            return "asynchronous servers answer one worker at a time over TCP (--mode sync)"
        if self.launcher != "local":
            return ("under torchrun the ranks may be on other nodes (the local launcher's are "
                    "all on this host)")
        if self.emulate_network:
            return "an emulated network puts every rank on its own host and link"
        if self.stage_host or self.device != "cpu":
            return "GPU workers stage their pieces through pinned buffers over Gloo"
        return None

    @property
    def exchange_form(self) -> str:
        """The one statement of which exchange form this run's runner has.

        - synchronous parameter server cut into pieces (``piece_bytes``):
          ``theory.comm.PIPELINED``, the full-duplex pipelined form of
          :func:`scalelab.theory.comm.ps_pipelined_s`
          (``max(S_p / B_w, S_p N_w / (N_ps B_ps))``): a worker pushes each piece the moment
          backward has produced it and pulls it back as soon as its server has applied it,
          so pushes and pulls cross every link in opposite directions at once
          (:mod:`scalelab.runner.ps`).
        - synchronous parameter server without ``piece_bytes`` (the default): every shard is
          one piece, which a server answers only once it has it from every worker, so each
          server's exchange is ``theory.comm.PUSH_THEN_PULL`` (all pushes, then all pulls).
        - asynchronous parameter server: :data:`ASYNC_EXCHANGE`.
        - all-reduce: :data:`ALLREDUCE_EXCHANGE` (:func:`scalelab.theory.comm.ring_allreduce_s`);
          with one worker :data:`ONE_WORKER_EXCHANGE` (:mod:`scalelab.runner.allreduce`).
        - sharded: :data:`FSDP_EXCHANGE` by level (:func:`scalelab.theory.zero.exchange_bytes`).
        """
        if self.architecture == "allreduce":
            return ALLREDUCE_EXCHANGE if self.workers > 1 else ONE_WORKER_EXCHANGE
        if self.architecture == "fsdp":
            return FSDP_EXCHANGE[self.shard_level]
        if self.mode == "async":
            return ASYNC_EXCHANGE
        return PIPELINED if self.piece_bytes else PUSH_THEN_PULL

    @property
    def samples_per_worker_step(self) -> int:
        """Samples one worker trains on between two exchanges: b x K."""
        return self.batch_size * self.accumulation_steps

    # -- ranks and roles --------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.workers + (self.ps or 0)

    def role_of(self, rank: int) -> tuple[str, int]:
        """``("worker", k)`` or ``("server", k)`` for a global rank."""
        assert 0 <= rank < self.world_size, rank
        if self.architecture != "ps":
            return "worker", rank
        if self._alternating:
            return ("worker" if rank % 2 == 0 else "server"), rank // 2
        return ("worker", rank) if rank < self.workers else ("server", rank - self.workers)

    @property
    def _alternating(self) -> bool:
        """Colocated with one server per worker: ranks alternate worker, server."""
        return self.colocate and self.architecture == "ps" and self.ps == self.workers

    def worker_rank(self, k: int) -> int:
        return 2 * k if self._alternating else k

    def server_rank(self, k: int) -> int:
        return 2 * k + 1 if self._alternating else self.workers + k

    def host_of(self, rank: int) -> int:
        """Host index of a rank on an emulated network (colocated servers share a worker's
        host: server k on host ``k mod W``)."""
        if self.colocate and self.architecture == "ps":
            role, k = self.role_of(rank)
            return k if role == "worker" else k % self.workers
        return rank

    @property
    def num_hosts(self) -> int:
        return self.workers if (self.colocate and self.architecture == "ps") else self.world_size

    def describe_rank(self, rank: int) -> str:
        role, k = self.role_of(rank)
        return f"rank {rank} ({role} {k})"

    # -- serialization ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["workload"] = self.workload.to_dict()
        d["exchange_form"] = self.exchange_form
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        keys = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in keys}
        kw["workload"] = WorkloadSpec.from_dict(d["workload"])
        return cls(**kw)
