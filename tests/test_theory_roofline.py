import pytest

from scalelab.theory.roofline import RooflineOp, op_time_s, roofline_step, step_floor_s


def test_op_time_is_the_larger_of_compute_and_memory():
    # 1 TFLOP at 100 TFLOP/s x 0.5 = 20 ms; 1 GB at 1 TB/s x 0.5 = 2 ms
    assert op_time_s(1e12, 1e9, 100e12, 1e12, 0.5, 0.5) == pytest.approx(0.02)
    # memory-bound: 10 GB at 1 TB/s x 0.8 = 12.5 ms beats 1 ms of compute
    assert op_time_s(1e11, 10e9, 100e12, 1e12, 1.0, 0.8) == pytest.approx(0.0125)


def test_step_sums_ops_and_splits_by_bound():
    ops = [RooflineOp(1e12, 1e9, 100e12), RooflineOp(0.0, 4e9, 100e12, kernels=3)]
    r = roofline_step(ops, 1e12, e_c=0.5, e_m=0.5)
    assert r.compute_bound_s == pytest.approx(0.02)
    assert r.memory_bound_s == pytest.approx(0.008)
    assert r.step_s == pytest.approx(0.028) and r.bound == "compute" and r.kernels == 4


def test_step_never_below_the_launch_floor():
    ops = [RooflineOp(1e3, 1e3, 100e12) for _ in range(1000)]
    r = roofline_step(ops, 1e12, 1.0, 1.0, launch_s=4e-6)
    assert r.floor_s == pytest.approx(1000 * 4e-6) == step_floor_s(1000, 4e-6)
    assert r.step_s == pytest.approx(r.floor_s) and r.bound == "launch"
    assert r.roofline_s < r.floor_s


@pytest.mark.parametrize("e_c,e_m", [(0.0, 0.5), (0.5, 1.5), (-1, 0.5)])
def test_fractions_outside_unit_interval_refused(e_c, e_m):
    with pytest.raises(ValueError, match="must be in"):
        op_time_s(1.0, 1.0, 1e12, 1e12, e_c, e_m)


def test_bad_ops_refused():
    with pytest.raises(ValueError, match="peak_flops"):
        RooflineOp(1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match=">= 0"):
        RooflineOp(-1.0, 1.0, 1e12)
    with pytest.raises(ValueError, match=">= 0"):
        step_floor_s(-1, 1e-6)
