"""Gradient exchange time per step: parameter servers, ring and hierarchical all-reduce.

Symbols: ``S_p`` gradient bytes per worker per step (``param_bytes``), ``N_w`` workers
sending to the servers, ``N_ps`` servers, ``B_w``/``B_ps`` per-direction bandwidth of a
worker's and a server's link (bytes/s), ``f_k`` the fraction of the bytes on server k.

Parameter server. Each worker pushes its S_p gradient bytes (split over the servers) and
pulls S_p parameter bytes back. Server k receives ``N_w S_p f_k`` and sends the same. Two
schedules, named because they differ by up to a factor of two:

- **push-then-pull, half-duplex** (the paper's form): every worker pushes everything, the
  servers apply, then every worker pulls; each phase uses one direction of each link at a
  time. With even shards the server side takes ``2 S_p N_w / (N_ps B_ps)``.
- **pipelined, full-duplex**: shards are pulled as soon as they are updated, so pushes and
  pulls run at once in opposite directions of every link:
  ``max(S_p / B_w, S_p N_w / (N_ps B_ps))`` in all.

Either way a worker's own link bounds the exchange (``2 S_p / B_w`` half-duplex,
``S_p / B_w`` full-duplex), whatever the number of servers.

Dedicated servers sit on their own machines. Colocated servers (one on each of the N_w
worker machines) share the worker's link: in a push phase a machine sends its gradient
minus its local shard, ``S_p (1 - f_k)``, and receives ``S_p f_k (N_w - 1)`` for its shard.

Ring all-reduce over N members (reduce-scatter then all-gather, N-1 steps each, each member
sending S_p/N per step): ``2 (N-1)/N * S_p / B + 2 (N-1) latency``. This is the definition
behind nccl-tests' bus bandwidth: ``busbw = algbw * 2 (N-1)/N`` with ``algbw = S_p / t``.

Hierarchical: a ring inside each node over its link (reduce-scatter, then all-gather back),
and between them a ring over the nodes through the NIC, each node sending its reduced
S_p (the node's GPUs share the one NIC).

Overlap: a fraction ``o`` of the exchange hides behind backward:
``T = T_C + T_IO + (1 - o) T_comm``, never less than ``max(T_C, T_comm)``.

Assumptions: bandwidth is the per-direction payload rate actually achieved; no congestion
beyond the links named; message latency is counted once per phase (the messages of a phase
are in flight together) for parameter servers, once per ring step for all-reduce.
"""

from __future__ import annotations

from dataclasses import dataclass

PUSH_THEN_PULL = "push-then-pull (half-duplex)"
PIPELINED = "pipelined (full-duplex)"


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")


def ps_push_then_pull_s(
    param_bytes: float, workers: int, num_ps: int, ps_bandwidth_Bps: float
) -> float:
    """The paper's form, even shards: T_ps = 2 S_p N_w / (N_ps B_ps) (server side)."""
    _positive("ps_bandwidth_Bps", ps_bandwidth_Bps)
    _positive("num_ps", num_ps)
    return 2.0 * param_bytes * workers / (num_ps * ps_bandwidth_Bps)


def ps_pipelined_s(
    param_bytes: float,
    workers: int,
    num_ps: int,
    ps_bandwidth_Bps: float,
    worker_bandwidth_Bps: float,
) -> float:
    """Full-duplex pipelined, even shards: max(S_p / B_w, S_p N_w / (N_ps B_ps))."""
    _positive("ps_bandwidth_Bps", ps_bandwidth_Bps)
    _positive("worker_bandwidth_Bps", worker_bandwidth_Bps)
    _positive("num_ps", num_ps)
    return max(
        param_bytes / worker_bandwidth_Bps,
        param_bytes * workers / (num_ps * ps_bandwidth_Bps),
    )


def worker_link_s(
    param_bytes: float, worker_bandwidth_Bps: float, full_duplex: bool = False
) -> float:
    """Lower bound set by one worker's link: 2 S_p / B_w (half), S_p / B_w (full duplex)."""
    _positive("worker_bandwidth_Bps", worker_bandwidth_Bps)
    return (1.0 if full_duplex else 2.0) * param_bytes / worker_bandwidth_Bps


@dataclass(frozen=True)
class PsExchange:
    """One step's parameter-server exchange: phases and which side bounds them."""

    push_s: float
    pull_s: float
    comm_s: float
    worker_s: float  # time the busiest worker link needs (both directions' worth)
    server_s: float  # time the busiest server link needs
    form: str


def ps_exchange(
    param_bytes: float,
    workers: int,
    largest_fraction: float,
    worker_bandwidth_Bps: float,
    ps_bandwidth_Bps: float,
    colocated: bool = False,
    full_duplex: bool = False,
    smallest_fraction: float | None = None,
    latency_s: float = 0.0,
) -> PsExchange:
    """Push, pull and total exchange time with uneven shards (largest fraction f_max).

    Dedicated servers, per phase: the worker sends S_p over B_w, the busiest server takes
    N_w S_p f_max over B_ps; the phase lasts ``max(S_p/B_w, N_w S_p f_max/B_ps)``.
    Push-then-pull: ``comm = push + pull``. Pipelined: both phases at once, ``comm`` is one
    phase's time and push and pull each last that long.

    Colocated (one server on each worker machine, one shared link of B_w): push phase
    ``max(S_p (1 - f_min), S_p f_max (N_w - 1)) / B_w`` (the machine with the smallest
    local shard sends the most; the one with the largest receives the most). Pipelined:
    the busiest machine's outgoing direction carries its push and its server's replies,
    ``S_p (1 - f_max) + S_p f_max (N_w - 1)``. With even shards both give
    ``2 (N_w - 1)/N_w * S_p / B``, the ring all-reduce's bytes.

    ``latency_s`` is added once per phase.
    """
    _positive("worker_bandwidth_Bps", worker_bandwidth_Bps)
    if not 0 < largest_fraction <= 1:
        raise ValueError(f"largest shard fraction must be in (0, 1], got {largest_fraction}")
    s = float(param_bytes)
    n = workers
    if colocated:
        f_min = largest_fraction if smallest_fraction is None else smallest_fraction
        if n <= 1:
            return PsExchange(0.0, 0.0, 0.0, 0.0, 0.0, PIPELINED if full_duplex else PUSH_THEN_PULL)
        worker_phase = s * (1.0 - f_min) / worker_bandwidth_Bps
        server_phase = s * largest_fraction * (n - 1) / worker_bandwidth_Bps
        if full_duplex:
            busiest = (s * (1.0 - largest_fraction) + s * largest_fraction * (n - 1))
            phase = max(busiest / worker_bandwidth_Bps, worker_phase) + latency_s
            return PsExchange(phase, phase, phase, worker_phase, server_phase, PIPELINED)
    else:
        _positive("ps_bandwidth_Bps", ps_bandwidth_Bps)
        worker_phase = s / worker_bandwidth_Bps
        server_phase = s * n * largest_fraction / ps_bandwidth_Bps
    phase = max(worker_phase, server_phase) + latency_s
    if full_duplex:
        return PsExchange(phase, phase, phase, worker_phase, server_phase, PIPELINED)
    return PsExchange(phase, phase, 2.0 * phase, 2.0 * worker_phase, 2.0 * server_phase,
                      PUSH_THEN_PULL)


def ring_allreduce_bytes(param_bytes: float, members: int) -> float:
    """Bytes each ring member sends (and receives): 2 (N-1)/N * S_p.

    Reduce-scatter passes N-1 chunks of S_p/N around the ring, all-gather N-1 more, so
    each member's link carries 2 (N-1) S_p / N per direction; zero for one member.
    """
    if members <= 1:
        return 0.0
    return 2.0 * (members - 1) / members * param_bytes


def ps_worker_bytes(param_bytes: float) -> float:
    """Bytes a parameter-server sender moves per step over its link: push S_p + pull S_p."""
    return 2.0 * param_bytes


def ring_allreduce_s(
    param_bytes: float, members: int, bandwidth_Bps: float, latency_s: float = 0.0
) -> float:
    """T_ar = 2 (N-1)/N * S_p / B + 2 (N-1) latency; zero for one member."""
    if members <= 1:
        return 0.0
    _positive("bandwidth_Bps", bandwidth_Bps)
    n = members
    return ring_allreduce_bytes(param_bytes, n) / bandwidth_Bps + 2.0 * (n - 1) * latency_s


def ring_allgather_s(whole_bytes: float, members: int, bandwidth_Bps: float,
                     latency_s: float = 0.0, collectives: int = 1) -> float:
    """Ring all-gather of a tensor of ``whole_bytes`` (each member holds 1/N of it), or ring
    reduce-scatter of one (each keeps the sum of its 1/N), issued as ``collectives`` pieces
    (FSDP's units): every member receives the other members' shares over N-1 steps,
    ``(N-1)/N S / B + (N-1) latency`` per piece; zero for one member."""
    if members <= 1:
        return 0.0
    _positive("bandwidth_Bps", bandwidth_Bps)
    n = members
    return (n - 1) / n * whole_bytes / bandwidth_Bps + collectives * (n - 1) * latency_s


def nccl_bus_bandwidth_Bps(param_bytes: float, members: int, time_s: float) -> float:
    """nccl-tests' all-reduce bus bandwidth: (S_p / t) * 2 (N-1) / N."""
    _positive("time_s", time_s)
    return param_bytes / time_s * 2.0 * (members - 1) / members


@dataclass(frozen=True)
class HierarchicalExchange:
    intra_s: float  # reduce-scatter + all-gather inside the node
    inter_s: float  # ring over the nodes through the NIC
    comm_s: float


def hierarchical_allreduce(
    param_bytes: float,
    gpus_per_node: int,
    nodes: int,
    intra_bandwidth_Bps: float,
    inter_bandwidth_Bps: float,
    latency_s: float = 0.0,
) -> HierarchicalExchange:
    """Inside the node: ``2 (g-1)/g * S_p / B_intra``; across: ring over nodes on the NIC.

    The in-node ring has no network latency term (device links are microseconds); the
    inter-node ring pays ``2 (n-1) latency``.
    """
    intra = ring_allreduce_s(param_bytes, gpus_per_node, intra_bandwidth_Bps)
    inter = ring_allreduce_s(param_bytes, nodes, inter_bandwidth_Bps, latency_s)
    return HierarchicalExchange(intra, inter, intra + inter)


def overlapped_step_s(
    compute_s: float, comm_s: float, io_exposed_s: float = 0.0, overlap: float = 0.0
) -> float:
    """T = T_C + T_IO + (1 - o) T_comm, floored at max(T_C, T_comm)."""
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be in [0, 1], got {overlap}")
    return max(compute_s + io_exposed_s + (1.0 - overlap) * comm_s, compute_s, comm_s)


DDP_BUCKET_BYTES = 25 * 1024 * 1024  # torch DistributedDataParallel's bucket_cap_mb=25 (MiB)


def ddp_exposed_s(comm_s: float, backward_s: float, param_bytes: float,
                  bucket_bytes: float = DDP_BUCKET_BYTES) -> float:
    """Exchange left exposed after backward when buckets are reduced as backward goes on.

    DDP cuts the gradients into ``k = ceil(S_p / bucket)`` buckets and starts reducing a
    bucket as soon as backward has produced it. Take the gradients as produced evenly over
    the backward time ``T_b`` (bucket i ready at ``i T_b / k``) and the reductions as run one
    at a time, each taking ``c = T_comm / k``. The last reduction ends at
    ``max(T_b + c, T_b / k + T_comm)``: either every bucket's reduction fits in the gap
    before the next is ready, and only the last one (``c``) shows, or the reductions queue
    up behind the first and the exchange ends ``T_comm`` after it. Exposed:

        T_exposed = max(c, T_comm - T_b (k - 1) / k)

    Zero exchange exposes nothing; one bucket (``k = 1``) hides nothing.
    """
    if comm_s <= 0:
        return 0.0
    if not backward_s >= 0 or not bucket_bytes > 0 or not param_bytes > 0:
        raise ValueError(f"need backward >= 0, bucket and gradient bytes > 0, got "
                         f"{backward_s}, {bucket_bytes}, {param_bytes}")
    k = max(1, -(-int(param_bytes) // int(bucket_bytes)))
    return max(comm_s / k, comm_s - backward_s * (k - 1) / k)


def ddp_allowed_comm_s(allowed_exposed_s: float, backward_s: float, param_bytes: float,
                       bucket_bytes: float = DDP_BUCKET_BYTES) -> float:
    """The longest exchange whose DDP-exposed part stays within ``allowed_exposed_s``.

    Inverting :func:`ddp_exposed_s`: ``max(T/k, T - T_b (k-1)/k) <= E`` holds for
    ``T <= min(k E, E + T_b (k-1)/k)``.
    """
    if allowed_exposed_s <= 0:
        return 0.0
    k = max(1, -(-int(param_bytes) // int(bucket_bytes)))
    return min(k * allowed_exposed_s, allowed_exposed_s + backward_s * (k - 1) / k)
