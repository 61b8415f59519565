"""One device's fit on grids: its fractions (e_c, e_m), its host's time per operation h and
its own cost per kernel tau, for given operation-class factors (what
:mod:`scalelab.hardware.fit` calls for every device in every round; the formulas and the
rules are in its docstring).

The loss of a device's points is searched over every (e_c, e_m) of one grid at once; each
point's misfit over that grid, ln R - ln T, is kept per curve, so the leave-out fits of the
bands and the operation classes' search, which ask for the same curves again, compute it
once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from scalelab.hardware.curve import _classes, _Curve, _Grid, point_curve
from scalelab.hardware.reference import RefPoint, reference
from scalelab.theory.roofline import host_step_s

_GRID = np.logspace(math.log10(0.005), 0.0, 121)
_LAMBDA = 0.02  # the pull of a device's fractions toward its class's (see fit's docstring)

# The host's time per operation h is fitted with a device's fractions, on a grid around the
# packaged measurement h0 (0.5 h0 to 4 h0), pulled toward h0 by _LAMBDA_H (ln h/h0)^2: it
# moves only where points sit on the host's floor N h (their steps would be shorter than
# the roofline can explain otherwise). Where no point could reach the floor even at the grid's
# largest h with the fractions at 1, h stays h0 and the search is skipped.
_HOST_GRID = 2.0 ** (np.arange(-4, 9) / 4.0)
_LAMBDA_H = 0.02


def _host_grid(points: Sequence[RefPoint], factors: tuple, e_u: float) -> np.ndarray:
    """The host times per operation worth trying for ``points``: the grid around h0 when
    some point could sit on its host's floor, else h0 alone."""
    h0 = reference().host_s_per_op
    for p in points:
        c = point_curve(p, factors, e_u, h0)
        if h0 > 0 and host_step_s(c.host_ops, h0 * _HOST_GRID[-1]) > float(c.device_s(1, 1)):
            return h0 * _HOST_GRID
    return np.array([h0])


_PAIRS = _Grid(_GRID)  # every (e_c, e_m) of the grid


@lru_cache(maxsize=1024)
def _misfit(c: _Curve, step_s: float) -> tuple[np.ndarray, float]:
    """(ln R - ln T over the whole grid, its least value) for curve ``c`` (the device's time
    alone) and the measured step ``step_s``, kept: the leave-one-out fits of the bands and the
    operation classes' search ask for the same curves again (the packaged fit and its bands:
    50,103 lookups, 6,674 computed)."""
    out = np.log(c.device_grid_s(_PAIRS)) - math.log(step_s)
    out.setflags(write=False)
    return out, float(out.min())


@lru_cache(maxsize=1024)
def _ratio(c: _Curve, step_s: float) -> np.ndarray:
    """R / T over the whole grid for curve ``c`` without the kernels' cost, kept: every cost
    per kernel tau of a fit reads it (:func:`_with_kernels`)."""
    out = c.device_grid_s(_PAIRS) / step_s
    out.setflags(write=False)
    return out


@lru_cache(maxsize=1024)
def _with_kernels(c: _Curve, step_s: float, k: float) -> tuple[np.ndarray, float]:
    """(ln(R + K tau) - ln T, its least value) for curve ``c`` without the kernels' cost,
    the measured step ``step_s`` and k = K tau / T, from :func:`_ratio`; kept, as
    :func:`_misfit` is: the packaged fit and its bands ask for 113,714 of these, 7,642
    different, and 1,024 kept serve 91% of them."""
    out = _ratio(c, step_s) + k
    np.log(out, out=out)
    out.setflags(write=False)
    return out, float(out.min())


@lru_cache(maxsize=64)
def _prior_grid(prior: tuple[float, float]) -> np.ndarray:
    """The prior's pull ``_LAMBDA * ((ln e_c - ln E_c)^2 + (ln e_m - ln E_m)^2)`` over the
    whole grid, kept (the fits ask for a few priors many thousand times)."""
    ec, em = _PAIRS.e_c, _PAIRS.e_m
    out = _LAMBDA * ((np.log(ec) - math.log(prior[0])) ** 2
                     + (np.log(em) - math.log(prior[1])) ** 2)
    out.setflags(write=False)
    return out


# The device's own cost per kernel tau (:mod:`scalelab.theory.roofline`) is fitted with a
# device's fractions in a class whose points hold at least MIN_KERNEL_MODELS models (one
# network at several batches cannot tell tau from the fractions): a grid from 0 to 80 us,
# pulled toward 0 by _LAMBDA_TAU ln(1 + tau / 5 us)^2. Elsewhere tau is 0. The pull was
# chosen by leaving each model out (benchmarks/published_fidelity.py): worst 23.4%, 23.4%,
# 32.2%, 57.9% at 0, 0.005, 0.01, 0.02 (median 5.3%, 4.1%, 4.1%, 5.0%).
_KERNEL_GRID = np.concatenate([[0.0], 5e-6 * 2.0 ** (np.arange(0, 9) / 2.0)])
_KERNEL_REF_S = 5e-6
_LAMBDA_TAU = 0.005
MIN_KERNEL_MODELS = 3


def _kernel_grid(points: Sequence[RefPoint], near: float | None = None) -> np.ndarray:
    """The costs per kernel worth trying for one device's points in one class: the grid, or
    with ``near`` (the round before's) that value and its neighbours on the grid."""
    if len({p.model for p in points}) < MIN_KERNEL_MODELS:
        return np.array([0.0])
    if near is None:
        return _KERNEL_GRID
    i = int(np.argmin(np.abs(_KERNEL_GRID - near)))
    return _KERNEL_GRID[max(0, i - 1):i + 2]


def _fit_device(points: Sequence[RefPoint], prior: tuple[float, float], factors: tuple = (),
                e_u: float = 1.0, hosts: Sequence[float] | None = None,
                kernels: Sequence[float] = (0.0,)) -> list[tuple]:
    """[(e_c, e_m, loss, h, tau)] of one device's points with the classes' ``factors`` and
    the FP32 units' fraction ``e_u``, for each host time per operation h in ``hosts``
    (default :func:`_host_grid`), each with the cost per kernel tau of ``kernels`` that fits
    best; the loss includes h's pull toward h0 and tau's toward 0."""
    h0 = reference().host_s_per_op
    hosts = _host_grid(points, factors, e_u) if hosts is None else hosts
    best: list[tuple] | None = None
    for tau in kernels:
        pull = _LAMBDA_TAU * math.log1p(tau / _KERNEL_REF_S) ** 2
        out = _fit_device_at(points, prior, factors, e_u, hosts, float(tau), h0)
        out = [(e_c, e_m, loss + pull, h, float(tau)) for e_c, e_m, loss, h in out]
        best = out if best is None else [min(a, b, key=lambda t: t[2])
                                         for a, b in zip(best, out)]
    return best


def _fit_device_at(points, prior, factors, e_u, hosts, tau: float, h0: float) -> list[tuple]:
    """[(e_c, e_m, loss, h)] for each h of ``hosts`` at the cost per kernel ``tau``."""
    base = _prior_grid((float(prior[0]), float(prior[1])))
    curves = [point_curve(p, factors, e_u, h0, tau) for p in points]
    # ln R - ln T with R the device's time alone; floored below by ln(floor) - ln T for each h
    # (ln is increasing: ln max(R, floor) = max(ln R, ln floor))
    misfit = [_misfit(c, p.step_s) if not tau else
              _with_kernels(point_curve(p, factors, e_u, h0), p.step_s, c.kernels_s / p.step_s)
              for p, c in zip(points, curves)]
    unfloored = None  # (i, j, loss) without h's pull, for every h no point's floor reaches
    out = []
    scratch = np.empty_like(base)
    for h in hosts:
        pull = _LAMBDA_H * math.log(h / h0) ** 2 if h0 > 0 else 0.0
        lows = [math.log(max(c.launch_floor_s, host_step_s(c.host_ops, h))) - math.log(p.step_s)
                for p, c in zip(points, curves)]
        if all(low <= least for low, (_, least) in zip(lows, misfit)):
            # max(m, low) is m everywhere: the same loss for all such h but for the pull
            if unfloored is None:
                loss = base + sum(m * m for m, _ in misfit)
                i, j = np.unravel_index(int(np.argmin(loss)), loss.shape)
                unfloored = (i, j, float(loss[i, j]))
            i, j, least_loss = unfloored
            out.append((float(_GRID[i]), float(_GRID[j]), least_loss + pull, float(h)))
            continue
        loss = base + pull
        for (m, least), low in zip(misfit, lows):
            if low <= least:  # max(m, low) is m everywhere
                np.multiply(m, m, out=scratch)
            else:
                np.maximum(m, low, out=scratch)
                scratch *= scratch
            loss += scratch
        i, j = np.unravel_index(int(np.argmin(loss)), loss.shape)
        out.append((float(_GRID[i]), float(_GRID[j]), float(loss[i, j]), float(h)))
    return out


def _fit_device_kept(points: tuple, prior: tuple, factors: tuple, e_u: float,
                     hosts: tuple, kernels: tuple) -> list[tuple]:
    """:func:`_fit_device`, kept for the factors of the operation classes ``points`` have:
    the others change none of their curves (:func:`point_curve` drops them), so the search
    of the classes' factors, which moves one factor at a time, reuses the fits of every
    device without that class."""
    present = set().union(*(_classes(p) for p in points))
    return _fit_device_cached(points, prior, tuple(f for f in factors if f[0] in present),
                              e_u, hosts, kernels)


@lru_cache(maxsize=4096)
def _fit_device_cached(points: tuple, prior: tuple, factors: tuple, e_u: float,
                       hosts: tuple, kernels: tuple) -> list[tuple]:
    return _fit_device(points, prior, factors, e_u, np.array(hosts), list(kernels))


def _fit_machine(groups: dict, priors: dict, factors: dict, e_u: dict,
                 kernel_s: dict | None = None, near: dict | None = None) -> dict:
    """(e_c, e_m, loss, h, points h sets, tau) per (device, class) of ``groups``, one host
    time h per device shared by its classes (one machine issues its steps whatever the
    precision): the h of the grid with the least summed loss. Each class's cost per kernel
    tau is fitted (:func:`_kernel_grid`, near the round before's where ``near`` has it)
    unless ``kernel_s`` gives it."""
    out = {}
    kernel_s, near = kernel_s or {}, near or {}
    for device in sorted({d for d, _ in groups}):
        mine = {k: ps for k, ps in groups.items() if k[0] == device}
        args = {k: (factors.get(k[1], ()), e_u.get(device, 1.0)) for k in mine}
        hosts = np.unique(np.concatenate([_host_grid(ps, *args[k]) for k, ps in mine.items()]))
        fits = {k: _fit_device_kept(tuple(ps), tuple(priors[k[1]]), *args[k],
                                    tuple(hosts.tolist()),
                                    (kernel_s[k],) if k in kernel_s else
                                    tuple(_kernel_grid(ps, near.get(k)).tolist()))
                for k, ps in mine.items()}
        best = min(range(len(hosts)), key=lambda i: sum(f[i][2] for f in fits.values()))
        for k, f in fits.items():
            e_c, e_m, loss, h, tau = f[best]
            curves = [point_curve(p, *args[k], h, tau) for p in mine[k]]
            bound = sum(1 for c in curves if c.floor_s > c.launch_floor_s
                        and c.floor_s >= float(c.device_s(e_c, e_m)))
            out[k] = (e_c, e_m, loss, h, bound, tau)
    return out
