"""Shard layouts: every element owned once, pieces bounded, placement as theory.sharding says."""

import time

import pytest
import torch

from scalelab.runner.partition import make_layout
from scalelab.runner.stage import pack as _pack
from scalelab.runner.stage import unpack as _unpack
from scalelab.runner.timers import StepTimer, maybe_phase, summarize
from scalelab.theory.sharding import greedy_whole_tensor

NUMELS = [300, 7, 1200, 33, 64, 1]


def _owned(layout) -> list[int]:
    owner = [0] * layout.total_numel
    for segs in layout.shards:
        for s, e in segs:
            for i in range(s, e):
                owner[i] += 1
    return owner


@pytest.mark.parametrize("partition", ["balanced", "tensor"])
@pytest.mark.parametrize("piece", [None, 50])
def test_every_element_has_one_server_and_one_piece(partition, piece):
    layout = make_layout(NUMELS, 3, partition, piece)
    assert _owned(layout) == [1] * sum(NUMELS)
    covered = [0] * sum(NUMELS)
    starts = [sum(NUMELS[:i]) for i in range(len(NUMELS))]
    for p in layout.pieces:
        assert p.numel <= (piece or 10**9)
        assert sum(b - a for _, a, b, _ in p.copies) == p.numel
        for t, a, b, _ in p.copies:
            for i in range(starts[t] + a, starts[t] + b):
                covered[i] += 1
    assert covered == [1] * sum(NUMELS)
    assert len({p.index for p in layout.pieces}) == len(layout.pieces)


def test_balanced_chunks_are_even_and_contiguous():
    layout = make_layout(NUMELS, 4, "balanced")
    sizes = [layout.shard_numel(k) for k in range(4)]
    assert max(sizes) - min(sizes) <= 1
    assert all(len(s) == 1 for s in layout.shards)


def test_tensor_placement_keeps_tensors_whole_with_theorys_loads():
    layout = make_layout(NUMELS, 3, "tensor")
    starts = {sum(NUMELS[:i]): n for i, n in enumerate(NUMELS)}
    for segs in layout.shards:
        for s, e in segs:
            assert starts[s] == e - s
    loads = sorted(layout.shard_numel(k) for k in range(3))
    assert loads == sorted(greedy_whole_tensor(NUMELS, 3))
    assert max(layout.shard_fractions()) == pytest.approx(1200 / sum(NUMELS))


def test_pack_unpack_round_trip():
    tensors = [torch.randn(n) for n in NUMELS]
    layout = make_layout(NUMELS, 2, "tensor", 40)
    out = [torch.zeros(n) for n in NUMELS]
    for p in layout.pieces:
        buf = torch.empty(p.numel)
        _pack(p, tensors, buf)
        _unpack(p, buf, out)
    assert all(torch.equal(a, b) for a, b in zip(tensors, out, strict=True))


def test_send_order_follows_backward():
    layout = make_layout(NUMELS, 1, "balanced", 100)
    order = layout.send_order(0)
    firsts = [min(p.tensors) for p in order]
    assert firsts == sorted(firsts, reverse=True)


def test_timers_and_summary():
    timer = StepTimer()
    timer.start_step()
    with maybe_phase(timer, "compute_s"):
        pass
    rec = timer.end_step()
    assert set(rec) == {"compute_s", "step_s", "cpu_s"} and rec["step_s"] >= rec["compute_s"] >= 0
    assert maybe_phase(None, "x") is maybe_phase(None, "y")  # off: one shared no-op
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median"] == 3.0 and s["p10"] == pytest.approx(1.4) and s["n"] == 5
    assert summarize([]) is None


def test_step_cpu_time_tells_busy_from_waiting():
    timer = StepTimer()
    timer.start_step()
    time.sleep(0.1)
    waiting = timer.end_step()
    timer.start_step()
    t = time.perf_counter()
    while time.perf_counter() - t < 0.1:
        pass
    busy = timer.end_step()
    assert waiting["cpu_s"] < 0.25 * waiting["step_s"]
    assert busy["cpu_s"] > 4 * waiting["cpu_s"] and busy["cpu_s"] > 0.02
