"""Cutting the flattened parameters into server shards and the pieces sent per step.

The parameters are concatenated in ``model.parameters()`` order into one flat vector of
``total_numel`` elements. A :class:`Partition` is a list of :class:`Piece` s, each a
contiguous range of that vector owned by one server; a piece is the unit of one
point-to-point message (its index is the message tag).

- ``balanced``: server k owns the contiguous chunk ``[k*N//P, (k+1)*N//P)``, optionally cut
  into pieces of at most ``piece_numel`` elements (so a worker can send the part of a chunk
  backward has finished while the rest is still being computed).
- ``tensor``: whole tensors, largest first, each onto the least-loaded server (ties to the
  lowest index), the placement of framework parameter-server strategies; loads agree with
  :func:`scalelab.theory.sharding.greedy_whole_tensor`. Each tensor is one piece, or several
  of at most ``piece_numel`` elements.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass
from itertools import accumulate

from scalelab.errors import UsageError


@dataclass(frozen=True)
class Piece:
    index: int
    server: int
    start: int
    end: int
    tensors: tuple[int, ...]  # indices of the parameter tensors the range overlaps

    @property
    def numel(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Partition:
    kind: str
    num_servers: int
    offsets: tuple[int, ...]  # start of every tensor in the flat vector, plus the total
    pieces: tuple[Piece, ...]

    @property
    def total_numel(self) -> int:
        return self.offsets[-1]

    def server_pieces(self, k: int) -> list[Piece]:
        return [p for p in self.pieces if p.server == k]

    def server_numel(self, k: int) -> int:
        return sum(p.numel for p in self.pieces if p.server == k)

    def pieces_of_tensor(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(len(self.offsets) - 1)]
        for p in self.pieces:
            for t in p.tensors:
                out[t].append(p.index)
        return out

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "num_servers": self.num_servers,
            "pieces": len(self.pieces),
            "server_numel": [self.server_numel(k) for k in range(self.num_servers)],
        }


def _split(start: int, end: int, piece_numel: int | None) -> list[tuple[int, int]]:
    if not piece_numel:
        return [(start, end)]
    return [(s, min(s + piece_numel, end)) for s in range(start, end, piece_numel)]


def _finish(kind, num_servers, offsets, ranges) -> Partition:
    ranges.sort()
    pieces = []
    for i, (start, end, k) in enumerate(ranges):
        first = bisect.bisect_right(offsets, start) - 1
        last = bisect.bisect_left(offsets, end) - 1
        tensors = tuple(t for t in range(first, last + 1) if offsets[t] < offsets[t + 1])
        pieces.append(Piece(i, k, start, end, tensors))
    return Partition(kind, num_servers, tuple(offsets), tuple(pieces))


def make_partition(
    numels: list[int], num_servers: int, kind: str = "balanced", piece_numel: int | None = None
) -> Partition:
    """Partition tensors of ``numels`` elements over ``num_servers`` servers."""
    if num_servers < 1:
        raise UsageError(f"need at least one server, got {num_servers}")
    offsets = [0, *accumulate(numels)]
    total = offsets[-1]
    ranges: list[tuple[int, int, int]] = []
    if kind == "balanced":
        if total < num_servers:
            raise UsageError(f"{total} parameters cannot be shared by {num_servers} servers")
        for k in range(num_servers):
            lo, hi = k * total // num_servers, (k + 1) * total // num_servers
            ranges += [(s, e, k) for s, e in _split(lo, hi, piece_numel)]
    elif kind == "tensor":
        sized = [t for t in range(len(numels)) if numels[t] > 0]
        if len(sized) < num_servers:
            raise UsageError(
                f"--partition tensor: {len(sized)} tensors cannot fill {num_servers} servers"
            )
        heap = [(0, k) for k in range(num_servers)]
        for t in sorted(sized, key=lambda t: (-numels[t], t)):
            load, k = heapq.heappop(heap)
            heapq.heappush(heap, (load + numels[t], k))
            ranges += [(s, e, k) for s, e in _split(offsets[t], offsets[t + 1], piece_numel)]
    else:
        raise UsageError(f"unknown partition {kind!r} (balanced or tensor)")
    return _finish(kind, num_servers, offsets, ranges)
