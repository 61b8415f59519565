"""validate's sharded cases: grid key architecture=fsdp with zero=1,2,3, the case's
inputs and its prediction (its step without exchange plus its collectives timed on its
link; without those measurements: DDP's step with the level's exposed exchange)."""

import pytest

from scalelab.errors import UsageError
from scalelab.experiment.case import CaseInputs, predict_case
from scalelab.experiment.validate import config_key, describe_config, expand, parse_grid
from scalelab.theory import zero


def test_grid_takes_fsdp_with_a_zero_level():
    cases = expand(parse_grid("workers=2 architecture=allreduce,fsdp zero=1,3 batch_size=8"))
    shapes = sorted((c["architecture"], c["zero"]) for c in cases)
    assert shapes == [("allreduce", None), ("fsdp", 1), ("fsdp", 3)]
    assert all(c["ps"] is None and c["partition"] is None for c in cases)
    z1 = next(c for c in cases if c["zero"] == 1)
    assert describe_config(z1) == "fsdp W=2 ZeRO-1 b=8 loopback"
    assert config_key(z1) != config_key(next(c for c in cases if c["zero"] == 3))
    # fsdp without a zero key runs run's default, level 3; other grids carry no zero key
    (only,) = expand(parse_grid("workers=2 architecture=fsdp batch_size=8"))
    assert only["zero"] == 3
    (plain,) = expand(parse_grid("workers=2 architecture=allreduce batch_size=8"))
    assert "zero" not in plain
    with pytest.raises(UsageError, match="zero"):
        parse_grid("architecture=fsdp zero=4")


def _inputs(**kw):
    base = dict(architecture="fsdp", workers=4, ps=0, partition="balanced",
                param_bytes=40e6, tensor_bytes=(), compute_s=0.2, contention=1.0,
                bandwidth_Bps=125e6, latency_s=0.0, full_duplex=True, zero=2)
    base.update(kw)
    return CaseInputs(**base)


def test_a_sharded_case_is_its_step_without_exchange_plus_its_collectives():
    # measured: the layout's step without exchange 30 ms (its workers at once), its
    # collectives 490 ms one after another on the case's link: nothing overlaps on CPU
    for level in (1, 2, 3):
        case = _inputs(zero=level, sharded_compute_s=0.030, link_exchange_s=0.490)
        got = predict_case(case)
        assert got.step_s == pytest.approx(0.030 + 0.490)
        assert got.comm_s == pytest.approx(0.490) and got.compute_s == pytest.approx(0.030)
        assert got.bottleneck == "communication" and "nothing overlapped" in got.form
        assert CaseInputs.from_dict(case.to_dict()) == case
    # ZeRO-1: DDP's buckets (60 and 140 ms of the 490) hide behind backward (20 ms) as far
    # as they can, 14 ms here
    z1 = _inputs(zero=1, sharded_compute_s=0.030, link_exchange_s=0.490,
                 allreduce_buckets_s=(0.060, 0.140), backward_s=0.020)
    assert predict_case(z1).step_s == pytest.approx(0.030 + 0.490 - 0.014)
    assert CaseInputs.from_dict(z1.to_dict()) == z1
    # the ZeRO-1 step is its own, not DDP's with a broadcast added
    assert predict_case(_inputs(zero=1, sharded_compute_s=0.030, link_exchange_s=0.490)
                        ).step_s != predict_case(_inputs(zero=1)).step_s
    with pytest.raises(ValueError, match="sharded_compute_s"):
        _inputs(sharded_compute_s=-1.0)


def test_a_sharded_case_is_ddps_step_with_the_levels_exposed_exchange():
    ddp = predict_case(_inputs(architecture="allreduce", zero=0))
    exposed = ddp.step_s - ddp.compute_s
    assert exposed > 0  # 40 MB over 1 Gb/s: more than backward hides
    for level in (1, 2, 3):
        got = predict_case(_inputs(zero=level))
        want = ddp.compute_s + zero.layout_exposed_s(f"zero{level}", exposed, ddp.comm_s,
                                                           ranks=4)
        assert got.step_s == pytest.approx(want)
        assert f"ZeRO-{level}" in got.form
        # its exchange: DDP's all-reduce, plus ZeRO-1's broadcasts (p Psi / B against the
        # all-reduce's 2 (N-1)/N g Psi / B: 4/6 of it at N = 4), 1.5x the bytes for ZeRO-3
        ratio = {1: 1 + 4 / 6, 2: 1.0, 3: 1.5}[level]
        assert got.comm_s == pytest.approx(ratio * ddp.comm_s)
    assert predict_case(_inputs(zero=3)).step_s > predict_case(_inputs(zero=2)).step_s
    assert predict_case(_inputs(zero=2)).step_s == pytest.approx(ddp.step_s)  # x1 the bytes


def test_case_inputs_round_trip_and_refuse_a_level_without_fsdp():
    case = _inputs(zero=1)
    assert CaseInputs.from_dict(case.to_dict()) == case
    assert "zero" not in _inputs(architecture="allreduce", zero=0).to_dict()
    assert "sharded_compute_s" not in case.to_dict()  # measured for timed cases only
    with pytest.raises(ValueError, match="zero"):
        _inputs(zero=0)
    with pytest.raises(ValueError, match="zero"):
        _inputs(architecture="allreduce", zero=2)
