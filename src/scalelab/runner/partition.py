"""Cutting the flattened parameters into parameter-server shards and message pieces.

The parameters, flattened in ``model.parameters()`` order, form one vector of ``n``
elements. A :class:`Layout` gives every server k a shard: a list of ``(start, end)``
segments of that vector, which the server stores as one contiguous buffer.

- ``balanced``: server k owns ``[k*n//P, (k+1)*n//P)`` (even contiguous chunks).
- ``tensor``: whole tensors, largest first, each to the least-loaded server (what framework
  parameter-server strategies do), as :func:`scalelab.theory.sharding.greedy_whole_tensor_owners`
  places them; one large tensor can dominate a server.

Each shard is then cut into pieces of at most ``piece_elems`` elements (one message each),
so a worker can send a piece as soon as backward has produced every gradient it covers and
a server can apply and return a piece while later pieces are still arriving.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scalelab.theory.sharding import greedy_whole_tensor_owners


@dataclass(frozen=True)
class Piece:
    """One message: ``[offset, offset+numel)`` of server ``server``'s shard buffer."""

    index: int  # unique over the layout; used as the message tag
    server: int
    offset: int
    numel: int
    # (tensor index, start within the tensor, end within the tensor, offset in the shard)
    copies: tuple[tuple[int, int, int, int], ...] = field(default=())

    @property
    def tensors(self) -> tuple[int, ...]:
        return tuple(sorted({c[0] for c in self.copies}))


@dataclass(frozen=True)
class Layout:
    tensor_numels: tuple[int, ...]
    shards: tuple[tuple[tuple[int, int], ...], ...]  # per server: global (start, end) segments
    pieces: tuple[Piece, ...]

    @property
    def num_servers(self) -> int:
        return len(self.shards)

    def shard_numel(self, k: int) -> int:
        return sum(e - s for s, e in self.shards[k])

    @property
    def total_numel(self) -> int:
        return sum(self.tensor_numels)

    def shard_fractions(self) -> list[float]:
        n = self.total_numel
        return [self.shard_numel(k) / n if n else 0.0 for k in range(self.num_servers)]

    def pieces_of(self, k: int) -> list[Piece]:
        return [p for p in self.pieces if p.server == k]

    def send_order(self, k: int) -> list[Piece]:
        """Pieces of server k in the order backward completes them (last tensors first)."""
        return sorted(self.pieces_of(k), key=lambda p: (-min(p.tensors), p.offset))


def _balanced(n: int, num_servers: int) -> list[list[tuple[int, int]]]:
    bounds = [k * n // num_servers for k in range(num_servers + 1)]
    return [[(bounds[k], bounds[k + 1])] if bounds[k + 1] > bounds[k] else []
            for k in range(num_servers)]


def _tensor_greedy(numels: list[int], num_servers: int) -> list[list[tuple[int, int]]]:
    starts = [sum(numels[:i]) for i in range(len(numels))]
    owners = greedy_whole_tensor_owners(numels, num_servers)
    return [[(starts[i], starts[i] + numels[i]) for i in range(len(numels)) if owners[i] == k]
            for k in range(num_servers)]


def make_layout(
    tensor_numels: list[int], num_servers: int, partition: str = "balanced",
    piece_elems: int | None = None,
) -> Layout:
    """Place ``tensor_numels`` (in parameter order) on ``num_servers`` servers."""
    assert num_servers >= 1
    numels = [int(n) for n in tensor_numels]
    n = sum(numels)
    if partition == "balanced":
        shards = _balanced(n, num_servers)
    elif partition == "tensor":
        shards = _tensor_greedy(numels, num_servers)
    else:
        raise ValueError(f"unknown partition {partition!r}")
    starts = [sum(numels[:i]) for i in range(len(numels))]

    def copies_for(seg_start: int, seg_end: int, shard_offset: int):
        out = []
        for t, (ts, tn) in enumerate(zip(starts, numels, strict=True)):
            a, b = max(seg_start, ts), min(seg_end, ts + tn)
            if a < b:
                out.append((t, a - ts, b - ts, shard_offset + (a - seg_start)))
        return out

    pieces: list[Piece] = []
    for k, segs in enumerate(shards):
        # the shard buffer is the concatenation of its segments
        seg_offsets, off = [], 0
        for s, e in segs:
            seg_offsets.append(off)
            off += e - s
        shard_n = off
        step = piece_elems if piece_elems else max(shard_n, 1)
        for p_off in range(0, shard_n, step):
            p_end = min(p_off + step, shard_n)
            copies = []
            for (s, e), so in zip(segs, seg_offsets, strict=True):
                a, b = max(p_off, so), min(p_end, so + (e - s))
                if a < b:
                    copies += copies_for(s + (a - so), s + (b - so), a)
            pieces.append(Piece(len(pieces), k, p_off, p_end - p_off, tuple(copies)))
    return Layout(tuple(numels), tuple(tuple(s) for s in shards), tuple(pieces))
