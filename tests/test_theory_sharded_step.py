"""The sharded CPU step's collectives (theory.sharded_step): what FSDP2 and
ZeroRedundancyOptimizer issue per step, Gloo's bytes for each, and the step on a link from
the step on loopback."""

import pytest

from scalelab.theory import sharded_step as ss
from scalelab.theory.sharded_step import Collective


def _kinds(cs):
    return [(c.kind, c.numel) for c in cs]


def test_fsdp_issues_one_gather_per_unit_and_zero3_gathers_again_in_backward():
    # two units of 11 and 30 parameters on 2 ranks: the 11 are padded to 12 (6 per rank)
    assert _kinds(ss.step_collectives(2, 2, [11, 30])) == [
        ("all_gather", 12), ("all_gather", 30), ("reduce_scatter", 30),
        ("reduce_scatter", 12)]
    assert _kinds(ss.step_collectives(3, 2, [11, 30])) == [
        ("all_gather", 12), ("all_gather", 30), ("all_gather", 30), ("reduce_scatter", 30),
        ("all_gather", 12), ("reduce_scatter", 12)]
    with pytest.raises(ValueError, match="level"):
        ss.step_collectives(4, 2, [1])


def test_zero1_all_reduces_ddps_buckets_then_broadcasts_every_tensor_from_its_owner():
    # DDP's buckets from the last parameter: the first closes at >= 1 MiB, the others 25 MiB
    assert ss.ddp_buckets([1_000_000, 300_000, 10]) == [300_010, 1_000_000]
    assert ss.ddp_buckets([10, 20]) == [30]
    cs = ss.step_collectives(1, 2, param_numels=[1_000_000, 300_000, 10])
    assert _kinds(cs[:2]) == [("all_reduce", 300_010), ("all_reduce", 1_000_000)]
    # largest first onto the least-loaded rank: 1e6 on rank 0, 3e5 and 10 on rank 1
    assert [(c.numel, c.src) for c in cs[2:]] == [(1_000_000, 0), (300_000, 1), (10, 1)]


def test_gloos_reduce_scatter_moves_an_all_reduces_bytes():
    n = 4
    ag, rs, ar = (Collective(k, 1000) for k in ("all_gather", "reduce_scatter", "all_reduce"))
    assert ss.wire_bytes(ag, n) == pytest.approx(0.75 * 4000)
    assert ss.wire_bytes(rs, n) == ss.wire_bytes(ar, n) == pytest.approx(1.5 * 4000)
    assert ss.wire_bytes(Collective("broadcast", 1000), 2) == 4000
    assert ss.wire_bytes(Collective("broadcast", 1000), 3) == 4000  # pipelined
    assert ss.wire_bytes(ag, 1) == 0.0
    # ZeRO-3 on Gloo moves 2x DDP's all-reduce bytes (2 gathers + an all-reduce's worth)
    cs = ss.step_collectives(3, 2, [1000, 3000])
    assert sum(ss.wire_bytes(c, 2) for c in cs) == pytest.approx(2 * 4000 * 4)
    with pytest.raises(ValueError, match="kind"):
        Collective("gather", 1)


def test_the_cpu_step_is_its_compute_plus_every_collective():
    assert ss.cpu_step_s(0.030, 0.490) == pytest.approx(0.520)
    with pytest.raises(ValueError):
        ss.cpu_step_s(-1, 0)


def test_zero1s_buckets_hide_behind_what_is_left_of_backward():
    # buckets of 60 and 140 ms, backward 20 ms: the first is ready at 6 ms and reduced until
    # 66 ms, the second (ready at 20 ms) until 206 ms: 186 ms show, 14 ms hide
    assert ss.buckets_exposed_s([0.060, 0.140], 0.020) == pytest.approx(0.186)
    assert ss.cpu_step_s(0.030, 0.390, [0.060, 0.140], 0.020) == pytest.approx(
        0.030 + 0.390 - 0.014)
    # one bucket hides nothing; short reductions leave only the last one's tail
    assert ss.buckets_exposed_s([0.2], 1.0) == pytest.approx(0.2)
    assert ss.buckets_exposed_s([0.01] * 4, 1.0) == pytest.approx(0.01)
    assert ss.buckets_exposed_s([0.1, 0.1], 0.0) == pytest.approx(0.2)
    assert ss.buckets_exposed_s([], 1.0) == 0.0


def test_a_models_collectives_are_counted_from_its_fsdp_units():
    from scalelab.experiment.sharded_timing import model_collectives
    from scalelab.workload import WorkloadSpec

    spec = WorkloadSpec("tests.toy_validate:alexnet_like", input_shape=(3, 32, 32),
                        num_classes=10)
    z3 = model_collectives(spec, 3, 2)
    assert [c.kind for c in z3].count("all_gather") == 16  # 8 layers with parameters, x2
    assert [c.kind for c in z3].count("reduce_scatter") == 8
    assert sum(c.numel for c in z3 if c.kind == "reduce_scatter") == 1_748_138
    z1 = model_collectives(spec, 1, 2)
    assert sum(c.numel for c in z1 if c.kind == "broadcast") == 1_748_138
    assert sum(c.numel for c in z1 if c.kind == "all_reduce") == 1_748_138
