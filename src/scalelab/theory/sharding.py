"""How parameter tensors land on parameter servers, and what the imbalance costs.

Servers finish a phase when the busiest one finishes, so with shard fractions ``f_k`` the
exchange behaves like ``1 / max(f_k)`` even servers: the *effective server count*.

Two placement policies:

- **whole tensors, greedily** (TensorFlow's ``GreedyLoadBalancingStrategy`` for parameter
  servers, and MXNet's kvstore for tensors below its split size): tensors sorted by size,
  largest first, each onto the currently least-loaded server (longest-processing-time
  first). A tensor larger than the rest put together stays whole: AlexNet's fc6 weight
  (9216 x 4096 floats, 151 MB of 244 MB) keeps one server at about 62% whatever the count,
  so the effective count stays <= 1.7.
- **even chunks**: the flattened gradient cut into N_ps contiguous pieces differing by at
  most one byte: fractions 1/N_ps.

Servers really needed: the smallest N with ``2 S_p N_w f_max(N) / B_ps <= T_C`` (the
lemma with the largest shard instead of 1/N); None when even one tensor alone is too
large to hide.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

WHOLE_TENSOR = "tensor"
EVEN_CHUNKS = "balanced"
POLICIES = (EVEN_CHUNKS, WHOLE_TENSOR)


def _check(num_servers: int) -> None:
    if int(num_servers) != num_servers or num_servers < 1:
        raise ValueError(f"number of servers must be an integer >= 1, got {num_servers}")


def greedy_whole_tensor_owners(tensor_sizes: Sequence[int], num_servers: int) -> tuple[int, ...]:
    """The server of each tensor under largest-first placement onto the least-loaded server.

    Ties: equal tensors in their given order, equally loaded servers lowest index first.
    """
    _check(num_servers)
    heap = [(0, k) for k in range(num_servers)]
    owners = [0] * len(tensor_sizes)
    for i in sorted(range(len(tensor_sizes)), key=lambda i: (-tensor_sizes[i], i)):
        load, k = heapq.heappop(heap)
        owners[i] = k
        heapq.heappush(heap, (load + tensor_sizes[i], k))
    return tuple(owners)


def greedy_whole_tensor(tensor_bytes: Sequence[int], num_servers: int) -> tuple[int, ...]:
    """Bytes per server after largest-first placement onto the least-loaded server."""
    loads = [0] * num_servers
    for size, k in zip(tensor_bytes, greedy_whole_tensor_owners(tensor_bytes, num_servers),
                       strict=True):
        loads[k] += size
    return tuple(loads)


def even_chunks(total_bytes: int, num_servers: int) -> tuple[int, ...]:
    """Bytes per server when the flattened gradient is cut into equal pieces."""
    _check(num_servers)
    q, r = divmod(int(total_bytes), num_servers)
    return tuple(q + (1 if k < r else 0) for k in range(num_servers))


@dataclass(frozen=True)
class ShardBalance:
    largest_fraction: float
    smallest_fraction: float
    effective_servers: float  # 1 / largest_fraction
    num_servers: int


def shard_balance(loads: Sequence[int]) -> ShardBalance:
    """Largest and smallest shard fraction and the effective server count 1/max(f_k)."""
    total = sum(loads)
    if total <= 0:
        raise ValueError("shards hold no bytes")
    big = max(loads) / total
    return ShardBalance(big, min(loads) / total, 1.0 / big, len(loads))


def even_chunk_balance(total_bytes: int, num_servers: int) -> ShardBalance:
    """:func:`shard_balance` of :func:`even_chunks` without building the shards.

    The largest piece holds ``ceil(S_p / N)`` bytes and the smallest ``floor(S_p / N)``.
    """
    _check(num_servers)
    total = int(total_bytes)
    if total <= 0:
        raise ValueError("shards hold no bytes")
    q, r = divmod(total, num_servers)
    big = (q + (1 if r else 0)) / total
    return ShardBalance(big, q / total, 1.0 / big, num_servers)


def placement(tensor_bytes: Sequence[int], num_servers: int, policy: str) -> ShardBalance:
    """Shard balance of ``policy`` ('balanced' even chunks or 'tensor' whole tensors)."""
    if policy == EVEN_CHUNKS:
        return even_chunk_balance(sum(tensor_bytes), num_servers)
    if policy == WHOLE_TENSOR:
        return shard_balance(greedy_whole_tensor(tensor_bytes, num_servers))
    raise ValueError(f"unknown placement policy {policy!r} (balanced or tensor)")


def largest_fraction(tensor_bytes: Sequence[int], num_servers: int, policy: str) -> float:
    return placement(tensor_bytes, num_servers, policy).largest_fraction


def servers_really_needed(
    tensor_bytes: Sequence[int],
    workers: int,
    ps_bandwidth_Bps: float,
    compute_s: float,
    policy: str,
    max_servers: int = 4096,
) -> int | None:
    """Smallest N with 2 S_p N_w f_max(N) / B_ps <= T_C, or None if none up to max_servers.

    For whole tensors f_max(N) never falls below the largest tensor's fraction, so the
    search stops at the number of tensors.
    """
    if not ps_bandwidth_Bps > 0 or not compute_s > 0:
        raise ValueError(
            f"need bandwidth > 0 and compute time > 0, got {ps_bandwidth_Bps}, {compute_s}"
        )
    total = sum(tensor_bytes)
    if total <= 0:
        raise ValueError("no parameter bytes")
    limit = ps_bandwidth_Bps * compute_s / (2.0 * total * workers)  # f_max must be <= limit
    if limit >= 1.0:
        return 1
    if policy == EVEN_CHUNKS:
        from scalelab.theory.sizing import ps_servers_needed

        n = ps_servers_needed(total, workers, ps_bandwidth_Bps, compute_s)
        return n if n <= max_servers else None
    if max(tensor_bytes) / total > limit * (1 + 1e-12):
        return None
    hi = min(max_servers, len(tensor_bytes))
    if largest_fraction(tensor_bytes, hi, policy) > limit * (1 + 1e-12):
        return None
    # f_max of greedy placement is not strictly monotone in N: scan upward from the
    # lemma's bound (no N below it can suffice, since f_max >= 1/N).
    lo = max(1, int(1.0 / limit))
    for n in range(lo, hi + 1):
        if largest_fraction(tensor_bytes, n, policy) <= limit * (1 + 1e-12):
            return n
    return hi


@lru_cache(maxsize=4096)
def cached_balance(tensor_bytes: tuple[int, ...], param_bytes: float, num_servers: int,
                   policy: str) -> ShardBalance:
    """:func:`placement` of the tensors, or even chunks of ``param_bytes``; memoized.

    A sweep asks for the same (model, N_ps) thousands of times, so the greedy placement is
    computed once per server count. Whole-tensor placement needs the tensor sizes.
    """
    if policy == WHOLE_TENSOR:
        if not tensor_bytes:
            raise ValueError("partition 'tensor' needs the model's tensor sizes "
                             "(a profile, or a workload file naming the model)")
        return placement(tensor_bytes, num_servers, policy)
    return even_chunk_balance(int(param_bytes), num_servers)
