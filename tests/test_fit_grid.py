"""The fit's grid evaluation of a step's roofline: the same values as the plain one."""

from __future__ import annotations

import numpy as np

from scalelab.hardware.curve import _Curve, _Grid, point_curve
from scalelab.hardware.grid_search import _GRID
from scalelab.hardware.reference import reference


def _same_on_grid(curve: _Curve, grid: _Grid) -> None:
    assert np.array_equal(curve.device_grid_s(grid), curve.device_s(grid.e_c, grid.e_m))


def test_grid_values_equal_the_plain_evaluation_for_reference_points():
    grid = _Grid(_GRID)
    points = [p for p in reference().points if p.device == "H200"]
    assert points
    for p in points:  # fp32 rows carry operations on the FP32 units, bf16 rows none
        _same_on_grid(point_curve(p, e_u=0.7), grid)


def test_a_breakpoint_inside_a_diagonal_is_looked_up_element_by_element():
    grid = _Grid(_GRID)
    spread = np.flatnonzero(grid.diag_lo < grid.diag_hi)
    assert len(spread)  # rounding spreads some diagonals' ratios
    d = spread[len(spread) // 2]
    inside = grid.ratio[grid.diag == d]
    r = float(inside.max())  # a breakpoint the diagonal's other ratios fall just below
    plain = _Curve(np.array([r]), np.array([1.0]), 0.0, 0, 0.0)
    idx = np.searchsorted(plain.r, inside, side="right")
    assert idx.min() == 0 and idx.max() == 1  # the lookup differs along the diagonal
    _same_on_grid(plain, grid)
    # with operations on other units too (their own lookup along e_m)
    a, b = np.array([r, 2.0 * r, 0.5]), np.array([1.0, 1.0, 1.0])
    u = np.array([False, False, True])
    _same_on_grid(_Curve(a, b, 0.0, 0, 0.0, u, e_u=0.5), grid)
