"""The step of sharded data parallelism on CPU ranks over Gloo: its collectives, one by one.

FSDP2 (ZeRO-2 and ZeRO-3 in :mod:`scalelab.runner.fsdp`) issues one collective per unit
(:func:`scalelab.profiler.memory.fsdp_units`) and phase, each over the unit's flat buffer:

- ZeRO-2 (``reshard_after_forward=False``): an all-gather of the unit's parameters before
  its forward, a reduce-scatter of its gradient after its backward;
- ZeRO-3 (``reshard_after_forward=True``): the same, and a second all-gather before its
  backward (the parameters were freed after forward).

ZeRO-1 (``ZeroRedundancyOptimizer`` over DDP) all-reduces the gradients as DDP does, one
all-reduce per bucket (:func:`ddp_buckets`), then every parameter is broadcast from the
rank that owns it (largest tensor first onto the least-loaded rank,
:func:`scalelab.theory.sharding.greedy_whole_tensor_owners`), one broadcast per tensor,
after the optimizer step.

**Nothing overlaps on CPU.** On a CPU device FSDP2 waits for each unit's all-gather before
the unit's compute and for the reduce-scatters before the optimizer step; there is no
second stream for a prefetch to run on, and the cores that would compute also copy the
buffers in and out (ZeRO-1's broadcasts follow the optimizer step, and DDP's all-reduce
hides behind backward only as long as backward lasts, a fraction of it on a slow link). So
the step is the sum of the compute, FSDP2's own work per unit (copy-in, copy-out, the
sharded optimizer on the local shards) and every collective's time (:func:`cpu_step_s`):
``T = R + X`` (less, for ZeRO-1, what of DDP's buckets hides behind backward), R the step
without its exchange (the ranks computing at once on the host's cores), X the step's
collectives one after another on its link. Moving the same ranks from loopback to a slower
link changes only X. On two ranks of an AlexNet-like model (8 units, 7.0 MB of fp32
parameters, batch 8) with the load average at 2-3 on two cores: loopback steps 74.3 ms
(ZeRO-2) and 81.5 ms (ZeRO-3); the collectives replayed alone, 35 ms (ZeRO-2) and 51 ms
(ZeRO-3) on loopback, 351 ms and 492 ms on a 300 Mbit/s emulated link; loopback's step
less its collectives plus the link's gives 390 ms and 522 ms against 387 ms and 519 ms
measured in ``scalelab run --emulate-network 300mbit``.

**Gloo's reduce-scatter costs an all-reduce.** ``reduce_scatter_tensor`` on Gloo took an
all-reduce's time of the same input at every size from 16 Ki to 1 Mi elements per rank,
on loopback and on a 300 Mbit/s link (two ranks: 235.5 ms against 235.3 ms for 8.4 MB),
not the half of it a ring reduce-scatter would take: it moves ``2 (N-1)/N`` of the input
per rank (:func:`wire_bytes`). The ideal ZeRO exchange of :mod:`scalelab.theory.zero`
(``(N-1)/N`` per reduce-scatter) is what NCCL's ring does on GPUs.

Bytes over the bandwidth (:func:`wire_bytes` / B) do not time them either: on the 300
Mbit/s link Gloo's all-gather of a 2.1 MB shard took 85 ms where 2.1 MB / 36.0 MB/s is
58 ms (1.47x; an all-reduce of the same bytes ran at the link's rate), so bytes over B are
a lower bound for all-gathers there; validation times the step's collectives on the case's
link instead (:mod:`scalelab.experiment.sharded_timing`).

R is timed with every rank training alone on a process group of one, all ranks at once:
timing the same layout's run on loopback instead (and subtracting its collectives
replayed there) was 2-3x too slow when other processes loaded the two cores: two ranks'
Gloo threads spinning through loopback collectives on busy cores cost far more than on a
link, where a rank sleeps while its bytes cross (ZeRO-3 at batch 8, load average 5 to 7:
158 ms on loopback against 59 ms in the 300 Mbit/s run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scalelab.theory.comm import DDP_BUCKET_BYTES

KINDS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "send")


@dataclass(frozen=True)
class Collective:
    """One collective of a step: its kind, the elements of the whole (unsharded) tensor,
    and for a broadcast its source rank."""

    kind: str
    numel: int
    src: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"collective kind must be one of {KINDS}, got {self.kind!r}")
        if self.numel < 0:
            raise ValueError(f"collective numel must be >= 0, got {self.numel}")


def padded_numel(numel: int, ranks: int) -> int:
    """Elements of a unit's flat buffer: FSDP2 pads each shard to ``ceil(numel / N)``."""
    return math.ceil(numel / ranks) * ranks


def ddp_buckets(param_numels: Sequence[int], bytes_per_element: float = 4,
                first_cap_bytes: float = 1024**2, cap_bytes: float = DDP_BUCKET_BYTES
                ) -> list[int]:
    """Elements of each gradient bucket DDP all-reduces, in the order it reduces them.

    DDP fills buckets with the parameters in reverse order (backward produces the last
    layer's gradient first); a bucket closes once it holds at least its cap: 1 MiB for the
    first, 25 MiB for the others (``bucket_cap_mb``'s default).
    """
    out, cur, cap = [], 0, first_cap_bytes
    for n in reversed(list(param_numels)):
        cur += int(n)
        if cur * bytes_per_element >= cap:
            out.append(cur)
            cur, cap = 0, cap_bytes
    if cur:
        out.append(cur)
    return out


def step_collectives(level: int, ranks: int, unit_numels: Sequence[int] = (),
                     param_numels: Sequence[int] = ()) -> list[Collective]:
    """The collectives of one step of ZeRO-``level`` on ``ranks`` ranks, in issue order.

    ``unit_numels``: parameters of each FSDP unit, forward order (ZeRO-2/3);
    ``param_numels``: of each parameter tensor, in the model's order (ZeRO-1's buckets and
    broadcasts).
    """
    if level not in (1, 2, 3):
        raise ValueError(f"ZeRO level must be 1, 2 or 3, got {level}")
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    if level == 1:
        from scalelab.theory.sharding import greedy_whole_tensor_owners

        owners = greedy_whole_tensor_owners(list(param_numels), ranks) if param_numels else ()
        by_rank = sorted(range(len(param_numels)), key=lambda i: owners[i])  # rank by rank
        return ([Collective("all_reduce", b) for b in ddp_buckets(param_numels)]
                + [Collective("broadcast", int(param_numels[i]), owners[i]) for i in by_rank])
    units = [padded_numel(int(u), ranks) for u in unit_numels if u > 0]
    out = [Collective("all_gather", u) for u in units]
    for u in reversed(units):
        if level == 3:
            out.append(Collective("all_gather", u))
        out.append(Collective("reduce_scatter", u))
    return out


def wire_bytes(c: Collective, ranks: int, bytes_per_element: float = 4) -> float:
    """Bytes on the busiest rank's link (each direction) for collective ``c`` on Gloo.

    Ring all-gather: each rank receives the other ``N-1`` shards, ``(N-1)/N`` of the whole;
    all-reduce: reduce-scatter + all-gather, ``2 (N-1)/N``; Gloo's reduce-scatter: an
    all-reduce's ``2 (N-1)/N`` (module docstring); broadcast: the whole tensor, pipelined
    link by link (:func:`scalelab.theory.zero.zero1_broadcast_s`). One rank: nothing.
    """
    if ranks <= 1:
        return 0.0
    whole = c.numel * bytes_per_element
    frac = (ranks - 1) / ranks
    if c.kind == "all_gather":
        return frac * whole
    if c.kind in ("all_reduce", "reduce_scatter"):
        return 2.0 * frac * whole
    return whole


def buckets_exposed_s(bucket_s: Sequence[float], backward_s: float) -> float:
    """DDP's bucket all-reduces left after backward, seconds (ZeRO-1's gradient exchange).

    ``bucket_s``: each bucket's all-reduce time on the link, in the order DDP reduces them
    (:func:`ddp_buckets`). As :func:`scalelab.theory.comm.ddp_exposed_s` takes them, the
    gradients come out evenly over backward (``T_b``), so bucket i is ready once backward
    has produced its share, at ``T_b (c_1 + ... + c_i) / C`` (a bucket's time in
    proportion to its bytes, C the sum), and the link reduces one bucket at a time:
    ``end_i = max(end_{i-1}, ready_i) + c_i``. Exposed: ``max(0, end_k - T_b)``; with one
    bucket nothing hides, with no backward everything shows.
    """
    if backward_s < 0 or any(c < 0 for c in bucket_s):
        raise ValueError("times must be >= 0")
    total = sum(bucket_s)
    if not total > 0:
        return 0.0
    end = done = 0.0
    for c in bucket_s:
        done += c
        end = max(end, backward_s * done / total) + c
    return max(end - backward_s, 0.0)


def cpu_step_s(compute_s: float, exchange_s: float, allreduce_bucket_s: Sequence[float] = (),
               backward_s: float = 0.0) -> float:
    """A sharded step on CPU ranks over Gloo, seconds: ``T = R + X - H``.

    ``compute_s`` (R) the step without its exchange, the ranks computing at once (forward,
    backward, FSDP2's work per unit, the optimizer); ``exchange_s`` (X) the step's
    collectives (:func:`step_collectives`) one after another on the ranks' link, timed
    (validation). FSDP2 overlaps nothing (module
    docstring): H = 0. ZeRO-1's gradients are DDP's buckets (``allreduce_bucket_s``, part
    of X), reduced while backward (``backward_s``) goes on: H is what of them hides,
    ``sum(c_i) - buckets_exposed_s(c, T_b)``; its broadcasts follow the optimizer step.
    """
    if min(compute_s, exchange_s) < 0:
        raise ValueError("times must be >= 0")
    hidden = sum(allreduce_bucket_s) - buckets_exposed_s(allreduce_bucket_s, backward_s)
    return compute_s + exchange_s - hidden
