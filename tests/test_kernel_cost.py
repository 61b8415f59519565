"""The device's own cost per kernel: added to the roofline, fitted where a device's points
hold several models, carried into the plan's estimate."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from scalelab.hardware import grid_search
from scalelab.hardware.curve import _Curve, _Grid, point_curve
from scalelab.hardware.estimate import estimate_step
from scalelab.hardware.fit import fit
from scalelab.hardware.grid_search import _GRID, MIN_KERNEL_MODELS
from scalelab.hardware.packaged import fit_and_bands
from scalelab.hardware.reference import RefPoint
from scalelab.theory.roofline import RooflineOp, roofline_step


def test_the_roofline_adds_each_kernels_cost():
    ops = [RooflineOp(1e12, 1e9, 1e14, kernels=3), RooflineOp(0.0, 4e9, 1e14, kernels=2)]
    plain = roofline_step(ops, 1e12, 0.5, 0.5)
    with_cost = roofline_step(ops, 1e12, 0.5, 0.5, kernel_s=10e-6)
    assert with_cost.kernels == 5
    assert with_cost.kernels_s == pytest.approx(50e-6)
    assert with_cost.roofline_s == pytest.approx(plain.roofline_s + 50e-6)
    assert with_cost.compute_bound_s == plain.compute_bound_s  # the bound is the work's
    with pytest.raises(ValueError):
        roofline_step(ops, 1e12, 0.5, 0.5, kernel_s=-1e-6)


def test_the_curve_adds_the_kernels_cost_everywhere_on_the_grid():
    rng = np.random.default_rng(3)
    a, b = rng.uniform(0, 1e-3, 40), rng.uniform(0, 1e-3, 40)
    u = rng.uniform(size=40) < 0.3
    grid = _Grid(np.logspace(-2, 0, 23))
    plain = _Curve(a, b, 0.0, 0, 0.0, u, 0.6)
    cost = _Curve(a, b, 0.0, 0, 0.0, u, 0.6, kernels_s=0.002)
    np.testing.assert_allclose(cost.device_grid_s(grid), plain.device_grid_s(grid) + 0.002)
    np.testing.assert_allclose(cost.device_s(grid.e_c, grid.e_m), cost.device_grid_s(grid))


def _synthetic(models, e_c, e_m, kernel_s, device="H200", precision="fp32", batch=32):
    """Points whose steps are exactly the curve at (e_c, e_m) with ``kernel_s`` per kernel."""
    out = []
    for m in models:
        p = RefPoint(m, device, precision, batch, 1.0, "synthetic", group="synthetic")
        t = float(point_curve(p, (), 0.5, None, kernel_s)(e_c, e_m))
        out.append(replace(p, samples_per_s=batch / t))
    return out


MODELS = ("resnet18", "alexnet", "vgg16")


def test_the_fit_finds_a_devices_cost_per_kernel_from_several_models(monkeypatch):
    assert len(MODELS) >= MIN_KERNEL_MODELS
    e_c, e_m = float(_GRID[100]), float(_GRID[105])
    pts = _synthetic(MODELS, e_c, e_m, 40e-6, batch=128)
    # with its pull toward 0 (three models leave the cost and the fractions near-degenerate)
    pulled = fit(pts).devices[("H200", "tf32")]
    assert 20e-6 <= pulled.kernel_s < 40e-6
    # without the pull the grid search finds the cost and the fractions the steps were made of
    monkeypatch.setattr(grid_search, "_LAMBDA_TAU", 0.0)
    pts = _synthetic(MODELS, e_c, e_m, 40e-6, batch=96)  # new points: not the cached fit
    got = fit(pts).devices[("H200", "tf32")]
    assert got.kernel_s == pytest.approx(40e-6)
    assert (got.e_c, got.e_m) == pytest.approx((e_c, e_m))
    none = fit(_synthetic(MODELS, e_c, e_m, 0.0, batch=96)).devices[("H200", "tf32")]
    assert none.kernel_s == 0.0


def test_one_model_cannot_tell_the_cost_per_kernel_from_the_fractions():
    pts = _synthetic(("resnet18",), float(_GRID[100]), float(_GRID[105]), 20e-6)
    pts += [replace(p, batch=p.batch * 4, samples_per_s=p.samples_per_s * 2) for p in pts]
    assert fit(pts).devices[("H200", "tf32")].kernel_s == 0.0


def test_a_borrowed_device_takes_the_cost_with_the_fractions():
    f = fit(_synthetic(MODELS, float(_GRID[100]), float(_GRID[105]), 40e-6, batch=128))
    own = f.fractions("H200", "fp32")
    # H100-SXM has no point here: it borrows its generation's (the H200's) fractions
    borrowed = f.fractions("H100-SXM", "fp32")
    assert own.kernel_s > 0 and borrowed.points == 0
    assert (borrowed.e_c, borrowed.e_m, borrowed.kernel_s) == (own.e_c, own.e_m, own.kernel_s)


def test_the_plan_counts_the_packaged_cost_per_kernel():
    from scalelab.opcount import step_ops

    f, b = fit_and_bands()
    fr = f.fractions("H200", "fp32")
    assert fr.kernel_s > 0  # the H200's six models in PyTorch's fp32 defaults ask for it
    ops = step_ops("resnet18", 32)
    with_cost = estimate_step(ops, "H200", "fp32", f=f, b=b)
    without = estimate_step(ops, "H200", "fp32", f=replace(f, devices={
        k: (replace(v, kernel_s=0.0) if k == ("H200", "tf32") else v)
        for k, v in f.devices.items()}), b=b)
    kernels = sum(o.kernels for o in ops.ops)
    assert with_cost.step_s == pytest.approx(without.step_s + kernels * fr.kernel_s)
    assert "own cost per kernel" in with_cost.how
