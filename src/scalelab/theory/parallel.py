"""Tensor, pipeline, data and context parallelism of a transformer: the step's extra terms.

Pure functions (numbers in, seconds or bytes out). b micro-batch sequences, s tokens per
sequence, h hidden, t tensor degree, p pipeline stages, v virtual stages per rank, m
micro-batches per step, w bytes per activation value.

Tensor parallelism (Shoeybi et al. 2019, Megatron-LM, sec. 3): the attention block splits
its heads and the MLP its width over t ranks; each block's output is a partial sum, so
forward ends each of the two blocks with an all-reduce of the b s h activations (the
operator g), and backward needs one more per block for the input's gradient (the operator
f): 2 all-reduces forward, 2 backward per layer, each ``2 (t-1)/t b s h w`` bytes per rank
on a ring. With sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2) each all-reduce
becomes an all-gather before the block and a reduce-scatter after it, ``(t-1)/t b s h w``
each: the same bytes. Full recomputation runs forward's two again in backward.
The link: NVLink inside a node; when t spans nodes, the slowest link of the ring, the NIC.

Pipeline parallelism (Narayanan et al. 2021, sec. 2.2): with p stages and m micro-batches,
GPipe and 1F1B idle each stage ``(p-1)`` micro-batch times of forward + backward out of
``m``: the bubble fraction ``(p-1)/m`` of the ideal time; the interleaved schedule with v
model chunks per rank shrinks it to ``(p-1)/(v m)``. Each stage boundary sends the b s h
activation forward and its gradient back per micro-batch (v times as many boundaries
interleaved). 1F1B keeps at most p micro-batches' activations in flight on stage 0
(stage i: p - i); interleaved keeps ``p (1 + (p-1)/(p v))`` stage-sized micro-batches
(Narayanan et al. 2021: its first stage runs ``2 (p-1) + (v-1) p`` chunk forwards
before its first backward, each chunk 1/v of the stage); GPipe keeps all m.

Data parallelism of the rank's shard: as :mod:`scalelab.theory.comm` (ring) and
:mod:`scalelab.theory.zero` (ZeRO levels) say, overlapped with the last micro-batch's
backward (:func:`dp_exposed_s`).

Context parallelism (plan only): the sequence is split into c chunks (2c for the causal
load balance); each rank passes its K and V blocks around a ring, c - 1 steps of
``2 b (s/c) h_kv w`` bytes. Ring attention overlaps each pass with the attention of the
block it holds; :func:`cp_ring_s` gives the passes' time, and the step model charges it in
full (an upper bound: plan only, it does not run on CPU).
"""

from __future__ import annotations

from scalelab.theory.comm import ring_allgather_s, ring_allreduce_s

SCHEDULES = ("1f1b", "gpipe", "interleaved")


def _check_schedule(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} ({', '.join(SCHEDULES)})")


def _positive_int(name: str, v: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


# -- tensor parallelism ------------------------------------------------------------------
def tp_collectives_per_layer(recompute: str = "none") -> int:
    """Collectives (all-reduces, or all-gather + reduce-scatter pairs) per layer and
    micro-batch: 2 forward + 2 backward, and 2 more with full recomputation."""
    return 6 if recompute == "full" else 4


def tp_layer_bytes(batch: int, seq: int, hidden: int, tp: int, value_bytes: float = 2.0
                   ) -> float:
    """Bytes one rank sends per all-reduce of the b s h activations: ``2 (t-1)/t b s h w``
    (the same for an all-gather plus a reduce-scatter with sequence parallelism)."""
    if tp <= 1:
        return 0.0
    return 2.0 * (tp - 1) / tp * batch * seq * hidden * value_bytes


def tp_layer_s(batch: int, seq: int, hidden: int, tp: int, bandwidth_Bps: float,
               latency_s: float = 0.0, *, value_bytes: float = 2.0,
               sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Tensor-parallel communication time per layer per micro-batch (forward + backward)
    on the ring of t ranks over ``bandwidth_Bps`` per direction."""
    if tp <= 1:
        return 0.0
    n = tp_collectives_per_layer(recompute)
    whole = batch * seq * hidden * value_bytes
    if sequence_parallel:
        one = 2.0 * ring_allgather_s(whole, tp, bandwidth_Bps, latency_s)
    else:
        one = ring_allreduce_s(whole, tp, bandwidth_Bps, latency_s)
    return n * one


def tp_link(tp: int, gpus_per_node: int) -> str:
    """Which link a tensor-parallel group crosses: 'intra' when it fits in a node (tp
    divides the GPUs per node, ranks adjacent as Megatron and torchtitan place them),
    'inter' (the NIC) otherwise."""
    return "intra" if tp <= gpus_per_node and gpus_per_node % tp == 0 else "inter"


# -- pipeline parallelism ----------------------------------------------------------------
def bubble_fraction(pp: int, micro_batches: int, schedule: str = "1f1b", vpp: int = 1
                    ) -> float:
    """Pipeline bubble over the ideal time: ``(p-1)/m`` (GPipe, 1F1B), ``(p-1)/(v m)``
    interleaved (Narayanan et al. 2021, sec. 2.2.1-2.2.2)."""
    _check_schedule(schedule)
    _positive_int("pp", pp)
    _positive_int("micro_batches", micro_batches)
    _positive_int("vpp", vpp)
    v = vpp if schedule == "interleaved" else 1
    return (pp - 1) / (v * micro_batches)


def p2p_bytes(batch: int, seq: int, hidden: int, value_bytes: float = 2.0, tp: int = 1,
              sequence_parallel: bool = False) -> float:
    """Bytes of one stage-boundary send: the b s h activation (its gradient the same back).
    With tensor parallelism Megatron's scatter-gather optimization (and sequence
    parallelism) sends 1/t of it from each tensor rank."""
    whole = batch * seq * hidden * value_bytes
    return whole / tp if (tp > 1 or sequence_parallel) else whole


def pp_p2p_s(batch: int, seq: int, hidden: int, pp: int, micro_batches: int,
             bandwidth_Bps: float, latency_s: float = 0.0, *, value_bytes: float = 2.0,
             tp: int = 1, sequence_parallel: bool = False, vpp: int = 1) -> float:
    """Exposed point-to-point time per step on the critical path: the first micro-batch's
    forward crosses ``v p - 1`` boundaries and the last one's gradient the same back; the
    other sends overlap with compute (1F1B sends while the next micro-batch computes).
    ``2 (v p - 1) (bytes / B + latency)``; zero for one stage."""
    if pp <= 1:
        return 0.0
    one = (p2p_bytes(batch, seq, hidden, value_bytes, tp, sequence_parallel) / bandwidth_Bps
           + latency_s)
    return 2.0 * (vpp * pp - 1) * one


def pp_link_bound_s(send_s: float, forward_s: float, backward_s: float, micro_batches: int,
                    vpp: int = 1) -> float:
    """What a pipeline's sends add beyond :func:`pp_p2p_s` when one send outlasts the
    compute it overlaps with. In the steady state a boundary passes one micro-batch (one
    chunk of it per virtual stage) forward every ``max(F, s)`` and back every ``max(B, s)``,
    with ``F`` and ``B`` a stage's forward and backward of one micro-batch over ``vpp``:
    ``(v m - 1) (max(0, s - F/v) + max(0, s - B/v))``; zero while every send is the shorter."""
    _positive_int("micro_batches", micro_batches)
    _positive_int("vpp", vpp)
    if send_s <= 0.0:
        return 0.0
    f, b = forward_s / vpp, backward_s / vpp
    return (vpp * micro_batches - 1) * (max(0.0, send_s - f) + max(0.0, send_s - b))


def pp_p2p_rendezvous_s(send_s: float, micro_batches: int) -> float:
    """A two-stage pipeline's sends on its critical path when a send cannot start before its
    receive is posted and each receive is posted just before its micro-batch is computed
    (Gloo's pairs: "sends cannot execute until the remote side is ready to receive",
    gloo/transport/tcp/pair.cc; ``torch.distributed.pipelining``'s schedules): every
    micro-batch's activation waits for the link going forward and its gradient coming back,
    ``2 m s``."""
    _positive_int("micro_batches", micro_batches)
    return 2.0 * micro_batches * max(0.0, send_s)


def in_flight_micro_batches(pp: int, micro_batches: int, schedule: str = "1f1b",
                            vpp: int = 1) -> float:
    """Micro-batches whose activations stage 0 holds at its peak, in units of one
    micro-batch's activations *of that stage*: GPipe all m; 1F1B min(p, m); interleaved
    ``min(m, p) (1 + (p-1)/(p v))`` (Narayanan et al. 2021, sec. 2.2.2: the first rank's
    warm-up runs ``(p-1) 2 + (v-1) p`` chunk forwards before its first backward, of
    ``v`` chunks each 1/v of the stage)."""
    _check_schedule(schedule)
    if pp <= 1:
        return 1.0
    if schedule == "gpipe":
        return float(micro_batches)
    base = float(min(pp, micro_batches))
    if schedule == "interleaved":
        return base * (1.0 + (pp - 1) / (pp * vpp))
    return base


# -- data parallelism --------------------------------------------------------------------
def dp_exposed_s(exchange_s: float, last_backward_s: float, overlap: float = 1.0) -> float:
    """The data-parallel exchange not hidden behind the last micro-batch's backward (the
    only one that produces the final gradients): ``max(0, T_x - o T_bwd,last)``."""
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be in [0, 1], got {overlap}")
    return max(0.0, exchange_s - overlap * last_backward_s)


# -- context parallelism -----------------------------------------------------------------
def cp_ring_s(batch: int, seq: int, kv_dim: int, cp: int, bandwidth_Bps: float,
              latency_s: float = 0.0, value_bytes: float = 2.0) -> float:
    """Ring attention's K and V passes per layer forward: ``(c-1)`` steps of the rank's
    ``2 b (s/c) h_kv w`` bytes (backward passes them again with their gradients: x 3 per
    layer per micro-batch in all)."""
    if cp <= 1:
        return 0.0
    block = 2.0 * batch * (seq / cp) * kv_dim * value_bytes
    return 3.0 * (cp - 1) * (block / bandwidth_Bps + latency_s)
