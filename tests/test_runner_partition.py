import pytest

from scalelab.errors import UsageError
from scalelab.runner.partition import make_partition
from scalelab.theory.sharding import even_chunks, greedy_whole_tensor


def _check_cover(part):
    ranges = sorted((p.start, p.end) for p in part.pieces)
    assert ranges[0][0] == 0 and ranges[-1][1] == part.total_numel
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert [p.index for p in part.pieces] == list(range(len(part.pieces)))


def test_balanced_chunks_are_even_and_contiguous():
    numels = [10, 3, 7, 1]
    part = make_partition(numels, 3, "balanced")
    _check_cover(part)
    assert [part.server_numel(k) for k in range(3)] == list(even_chunks(21, 3))
    # offsets 0,10,13,20,21: pieces [0,7) [7,14) [14,21)
    assert part.pieces[0].tensors == (0,)
    assert part.pieces[1].tensors == (0, 1, 2)
    assert part.pieces[2].tensors == (2, 3)


def test_balanced_pieces_of_fixed_size():
    part = make_partition([10, 3, 7, 1], 2, "balanced", piece_numel=4)
    _check_cover(part)
    assert all(p.numel <= 4 for p in part.pieces)
    assert [part.server_numel(k) for k in range(2)] == [10, 11]
    assert {p.server for p in part.pieces if p.end <= 10} == {0}


def test_tensor_partition_matches_greedy_loads():
    numels = [100, 5, 60, 60, 7, 1]
    part = make_partition(numels, 3, "tensor")
    _check_cover(part)
    loads = sorted(part.server_numel(k) for k in range(3))
    assert loads == sorted(greedy_whole_tensor(numels, 3))
    for p in part.pieces:  # whole tensors only
        assert len(p.tensors) == 1
        t = p.tensors[0]
        assert (p.start, p.end) == (part.offsets[t], part.offsets[t + 1])


def test_tensor_partition_split_into_pieces():
    part = make_partition([100, 5], 2, "tensor", piece_numel=30)
    _check_cover(part)
    assert part.server_numel(0) == 100 and len(part.server_pieces(0)) == 4


def test_bad_partitions():
    with pytest.raises(UsageError, match="cannot fill"):
        make_partition([4, 4], 3, "tensor")
    with pytest.raises(UsageError, match="cannot be shared"):
        make_partition([1, 1], 3, "balanced")
    with pytest.raises(UsageError, match="unknown partition"):
        make_partition([4], 1, "random")
