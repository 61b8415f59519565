"""Fitting the step model's free parameters to measured cases (what the cases constrain).

The free parameters are fields of :class:`scalelab.plan.step.ModelParams` (:data:`BOUNDS`):
``compute_scale`` (factor on T_C), ``bandwidth_efficiency`` (fraction of the link rate the
exchange achieves), ``overlap`` (fraction of the exchange hidden behind backward),
``latency_s`` (per-message latency added to the measured link's) and ``apply_s_per_byte``
(a server's update time per gradient byte it receives). Every parameter has a prior at its
uncalibrated value (the described cluster's, neutral by default) and bounds a physicist
would accept: a link delivers at most its rate, a LAN message takes under 50 ms, a server
applies at least 10 MB/s.

1. **Only what the cases constrain is fitted** (:func:`select`, in :data:`PARAMS` order:
   the link's efficiency and the overlap first, the measured compute's correction later).
   Each case's sensitivity to a parameter is the change of ``log T`` when the parameter goes
   from one bound to the other, the others at their prior (a secant, so that a parameter
   hidden at the prior by a ``max`` in the model, such as full overlap, is still seen). A
   parameter is fitted when at least two cases are sensitive to it (``>= 0.1``: over its
   range their step moves by 10% or more), when its column of sensitivities is not (within
   30% of its norm) a combination of those already chosen (otherwise the cases cannot tell
   it from them), and while there are two cases or more per fitted parameter. The others
   keep their prior, and the file says why.
2. **Fit**: minimise ``sum (log T_pred/T_meas)^2 / 0.05^2 + sum ((u - u_0)/0.5)^2`` over
   the chosen parameters, ``u`` each parameter as a fraction of its range (a measurement
   noise of 5% on a median step; a prior as wide as half the range), by bounded
   Levenberg-Marquardt from several starts (:func:`_starts`: the prior, the prior with one
   parameter near its far bound, mid-range), since a ``max`` in the model leaves no
   gradient in parts of the range (overlap above T_C / T_comm, for one).
   Uncertainty: the Gauss-Newton covariance ``(J^T J / s^2 + I / 0.5^2)^-1`` at the
   optimum, ``s^2`` the residual variance ``RSS / (n - p)``.

Whether the fitted model is used is decided by :mod:`scalelab.experiment.calibrate`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from scalelab.errors import UsageError
from scalelab.experiment.case import predict_case, summarize_errors
from scalelab.experiment.observations import Observation
from scalelab.plan.step import ModelParams

PARAMS = ("bandwidth_efficiency", "overlap", "compute_scale", "latency_s", "apply_s_per_byte")
BOUNDS: dict[str, tuple[float, float]] = {
    "bandwidth_efficiency": (0.05, 1.0),
    "overlap": (0.0, 1.0),
    "compute_scale": (0.25, 4.0),
    "latency_s": (0.0, 0.05),
    "apply_s_per_byte": (0.0, 1e-7),
}
NOISE = 0.05
PRIOR_WIDTH = 0.5
SENSITIVITY = 0.1
MIN_SENSITIVE_CASES = 2
INDEPENDENCE = 0.3
MAX_STEP = 0.1
OBJECTIVE = ("sum of (log(predicted/measured) / 0.05)^2 + sum of ((u - u_prior) / 0.5)^2, "
             "u = parameter as a fraction of its bounds")


def log_errors(observations: list[Observation], params: ModelParams) -> list[float]:
    """``log(T_pred / T_meas)`` of every observation under ``params``."""
    return [math.log(predict_case(o.inputs, params).step_s / o.measured_step_s)
            for o in observations]


def summary(errors: list[float]) -> dict[str, Any]:
    """Median and max |relative error| from log errors."""
    return summarize_errors([math.exp(e) - 1.0 for e in errors]).to_dict()


def _u(name: str, value: float) -> float:
    lo, hi = BOUNDS[name]
    return (value - lo) / (hi - lo)


def _theta(name: str, u: float) -> float:
    lo, hi = BOUNDS[name]
    return lo + min(1.0, max(0.0, u)) * (hi - lo)


def _at(prior: ModelParams, us: dict[str, float]) -> ModelParams:
    return dataclasses.replace(prior, **{k: _theta(k, u) for k, u in us.items()})


def _column(observations, prior: ModelParams, name: str, h: float) -> list[float]:
    """d log T / d u for every case, by differences over ``h`` of the range (inside bounds;
    ``h = 1``: from one bound to the other)."""
    u0 = _u(name, getattr(prior, name))
    up, dn = (1.0, 0.0) if h >= 1 else (min(1.0, u0 + h), max(0.0, u0 - h))
    hi = log_errors(observations, _at(prior, {name: up}))
    lo = log_errors(observations, _at(prior, {name: dn}))
    return [(a - b) / (up - dn) for a, b in zip(hi, lo)]


def _norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def select(observations: list[Observation], prior: ModelParams,
           candidates: tuple[str, ...] = PARAMS) -> tuple[tuple[str, ...], dict[str, str]]:
    """The parameters the cases constrain (in :data:`PARAMS` order) and why for each."""
    chosen: list[str] = []
    basis: list[list[float]] = []
    why: dict[str, str] = {}
    n = len(observations)
    for name in [p for p in PARAMS if p in candidates]:
        col = _column(observations, prior, name, 1.0)
        strong = sum(abs(v) >= SENSITIVITY for v in col)
        if strong < MIN_SENSITIVE_CASES:
            why[name] = (f"kept its prior: {strong} case(s) sensitive to it, "
                         f"{MIN_SENSITIVE_CASES} needed")
            continue
        if 2 * (len(chosen) + 1) > n:
            why[name] = (f"kept its prior: {n} cases constrain at most {n // 2} parameters "
                         "(two cases each)")
            continue
        rest = list(col)
        for b in basis:
            dot = sum(x * y for x, y in zip(rest, b))
            rest = [x - dot * y for x, y in zip(rest, b)]
        if _norm(rest) < INDEPENDENCE * _norm(col):
            why[name] = ("kept its prior: the cases do not tell its effect apart from "
                         + ", ".join(chosen))
            continue
        chosen.append(name)
        basis.append([x / _norm(rest) for x in rest])
        why[name] = f"fitted: {strong} of {n} cases sensitive to it"
    for name in PARAMS:
        why.setdefault(name, "kept its prior: not free")
    return tuple(chosen), why


def _inverse(a: list[list[float]]) -> list[list[float]]:
    """Gauss-Jordan inverse of a small symmetric positive definite matrix."""
    n = len(a)
    m = [row[:] + [float(i == j) for j in range(n)] for i, row in enumerate(a)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(m[r][i]))
        m[i], m[p] = m[p], m[i]
        piv = m[i][i]
        m[i] = [v / piv for v in m[i]]
        for r in range(n):
            if r != i:
                f = m[r][i]
                m[r] = [v - f * w for v, w in zip(m[r], m[i])]
    return [row[n:] for row in m]


def _residuals(observations, prior: ModelParams, names: list[str], x: list[float],
               u0: list[float]) -> list[float]:
    """Data residuals ``log(pred/meas) / NOISE`` then prior residuals ``(u - u0) / width``."""
    us = dict(zip(names, x))
    return ([e / NOISE for e in log_errors(observations, _at(prior, us))]
            + [(xi - ui) / PRIOR_WIDTH for xi, ui in zip(x, u0)])


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    inv = _inverse(a)
    return [sum(row[j] * b[j] for j in range(len(b))) for row in inv]


def _levenberg_marquardt(observations, prior: ModelParams, names: list[str],
                         start: list[float], u0: list[float], iterations: int = 80
                         ) -> tuple[list[float], float, int]:
    """Bounded Levenberg-Marquardt on the residuals (steps clipped to [0, 1] per parameter).

    The Jacobian is taken by forward differences of 1e-4 of each range (backward at the
    upper bound); the damping grows x4 on a rejected step and shrinks /3 on an accepted one;
    no step moves a parameter by more than :data:`MAX_STEP` of its range.
    """
    x = list(start)
    r = _residuals(observations, prior, names, x, u0)
    f, lam, evals = sum(v * v for v in r), 1e-3, 1
    for _ in range(iterations):
        cols = []
        for j in range(len(x)):
            h = 1e-4 if x[j] + 1e-4 <= 1.0 else -1e-4
            xh = x[:j] + [x[j] + h] + x[j + 1:]
            cols.append([(a - b) / h for a, b in
                         zip(_residuals(observations, prior, names, xh, u0), r)])
        evals += len(x)
        jtj = [[sum(a * b for a, b in zip(ci, cj)) for cj in cols] for ci in cols]
        jtr = [sum(a * b for a, b in zip(ci, r)) for ci in cols]
        while lam < 1e9:
            a = [[v + (lam * (1.0 + row[i]) if i == k else 0.0) for k, v in enumerate(row)]
                 for i, row in enumerate(jtj)]
            d = _solve(a, [-v for v in jtr])
            longest = max(abs(v) for v in d)
            if longest > MAX_STEP:  # a trust region: no jump across a kink of the model
                d = [v * MAX_STEP / longest for v in d]
            xn = [min(1.0, max(0.0, xi + di)) for xi, di in zip(x, d)]
            rn = _residuals(observations, prior, names, xn, u0)
            evals += 1
            fn = sum(v * v for v in rn)
            if fn < f:
                break
            lam *= 4.0
        else:
            break
        done = f - fn < 1e-10 * (1.0 + f)
        x, r, f, lam = xn, rn, fn, max(lam / 3.0, 1e-9)
        if done:
            break
    return x, f, evals


def _uncertainty(observations, params: ModelParams, free: tuple[str, ...]) -> dict[str, float]:
    """One standard deviation of each fitted parameter (Gauss-Newton), in its own unit."""
    if not free:
        return {}
    cols = [_column(observations, params, k, 0.01) for k in free]
    res = log_errors(observations, params)
    n, p = len(res), len(free)
    s2 = max(sum(r * r for r in res) / (n - p), 1e-8) if n > p else NOISE ** 2
    h = [[sum(a * b for a, b in zip(ci, cj)) / s2 + (1 / PRIOR_WIDTH ** 2 if i == j else 0.0)
          for j, cj in enumerate(cols)] for i, ci in enumerate(cols)]
    cov = _inverse(h)
    return {k: math.sqrt(max(cov[i][i], 0.0)) * (BOUNDS[k][1] - BOUNDS[k][0])
            for i, k in enumerate(free)}


@dataclass(frozen=True)
class ParameterFit:
    """One parameter of the model after the fit."""

    name: str
    value: float
    """The fitted value, or the prior when not fitted (the parameter's unit)."""
    prior: float
    """The uncalibrated value."""
    bounds: tuple[float, float]
    fitted: bool
    std: float | None
    """One standard deviation of the fitted value (None when not fitted)."""
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "bounds": list(self.bounds)}


@dataclass(frozen=True)
class Fit:
    """A fit to some observations: the parameters and the errors before and after."""

    params: ModelParams
    free: tuple[str, ...]
    """The parameters fitted (the cases constrain them)."""
    parameters: tuple[ParameterFit, ...]
    before: dict[str, Any]
    after: dict[str, Any]
    evaluations: int = 0
    per_case: tuple[dict, ...] = ()


def _check_free(free) -> tuple[str, ...]:
    free = tuple(free or PARAMS)
    unknown = [k for k in free if k not in BOUNDS]
    if unknown:
        raise UsageError(f"unknown parameter(s) {', '.join(unknown)} (free parameters: "
                         f"{', '.join(PARAMS)})")
    return free


def _starts(u0: list[float]) -> list[list[float]]:
    """The prior; the prior with one parameter moved near its far bound, for each; mid-range."""
    starts = [list(u0)]
    for j, u in enumerate(u0):
        starts.append(u0[:j] + [0.05 if u > 0.5 else 0.95] + u0[j + 1:])
    starts.append([0.5] * len(u0))
    return starts


def fit(observations: list[Observation], free: tuple[str, ...] | None = None,
        prior: ModelParams | None = None) -> Fit:
    """Fit the parameters of ``free`` (default all) that ``observations`` constrain."""
    candidates = _check_free(free)
    if not observations:
        raise UsageError("nothing to fit: no measured cases")
    prior = prior or ModelParams()
    chosen, why = select(observations, prior, candidates)
    names = list(chosen)
    u0 = [_u(k, getattr(prior, k)) for k in names]
    best, best_f, evals = list(u0), math.inf, 0
    for start in _starts(u0):
        x, fx, n = _levenberg_marquardt(observations, prior, names, start, u0) if names \
            else (start, 0.0, 0)
        evals += n
        if fx < best_f:
            best, best_f = x, fx
    params = _at(prior, dict(zip(names, best)))
    std = _uncertainty(observations, params, chosen)
    parameters = tuple(ParameterFit(k, getattr(params, k), getattr(prior, k), BOUNDS[k],
                                    k in chosen, std.get(k), why[k]) for k in PARAMS)
    before, after = log_errors(observations, prior), log_errors(observations, params)
    per_case = tuple({"config": o.config, "measured_step_s": o.measured_step_s,
                      "error_before": math.exp(b) - 1.0, "error_after": math.exp(a) - 1.0}
                     for o, b, a in zip(observations, before, after))
    return Fit(params, chosen, parameters, summary(before), summary(after), evals, per_case)
