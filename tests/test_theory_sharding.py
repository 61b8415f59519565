import pytest

from scalelab.opcount import describe
from scalelab.theory import sharding
from scalelab.workload import WorkloadSpec


@pytest.fixture(scope="module")
def alexnet_tensors():
    return describe(WorkloadSpec("alexnet"), flops=False).tensor_bytes


def test_alexnet_whole_tensor_leaves_62_percent(alexnet_tensors):
    total = sum(alexnet_tensors)
    assert max(alexnet_tensors) / total == pytest.approx(0.618, abs=0.005)
    for n in (2, 3, 4, 8, 16, 64, 183):
        bal = sharding.placement(alexnet_tensors, n, sharding.WHOLE_TENSOR)
        assert bal.largest_fraction == pytest.approx(0.62, abs=0.01)
        assert bal.effective_servers <= 1.7


def test_even_chunks_are_balanced(alexnet_tensors):
    for n in (1, 3, 8, 183):
        bal = sharding.placement(alexnet_tensors, n, sharding.EVEN_CHUNKS)
        assert bal.effective_servers == pytest.approx(n, rel=1e-6)
    loads = sharding.even_chunks(10, 3)
    assert loads == (4, 3, 3)
    for total, n in ((10, 3), (12, 4), (7, 7), (5, 9)):
        assert sharding.even_chunk_balance(total, n) == sharding.shard_balance(
            sharding.even_chunks(total, n))


def test_greedy_places_largest_first():
    loads = sharding.greedy_whole_tensor([5, 4, 3, 3, 1], 2)
    assert sorted(loads) == [8, 8]
    assert sum(sharding.greedy_whole_tensor([7, 1, 1], 5)) == 9


def test_servers_really_needed(alexnet_tensors):
    total = sum(alexnet_tensors)
    bw, t_c = 10e9 / 8, 0.171
    # balanced chunks: exactly the lemma's count
    assert sharding.servers_really_needed(alexnet_tensors, 8, bw, t_c, "balanced") == 19
    # whole tensors: fc6's weight alone is too big to hide on one 10GbE server
    assert sharding.servers_really_needed(alexnet_tensors, 8, bw, t_c, "tensor") is None
    # with a fast link whole tensors work but need more servers than the lemma's minimum
    fast = 2 * total * 8 / t_c  # one server just suffices for balanced... at f=1
    assert sharding.servers_really_needed(alexnet_tensors, 8, fast, t_c, "tensor") == 1
    n = sharding.servers_really_needed(alexnet_tensors, 8, fast / 1.5, t_c, "tensor")
    assert n is not None and n >= 2
    bal = sharding.placement(alexnet_tensors, n, "tensor")
    assert 2 * total * 8 * bal.largest_fraction / (fast / 1.5) <= t_c * (1 + 1e-9)


def test_bad_inputs():
    with pytest.raises(ValueError):
        sharding.even_chunks(10, 0)
    with pytest.raises(ValueError):
        sharding.placement([1, 2], 2, "random")
    with pytest.raises(ValueError):
        sharding.shard_balance([0, 0])
