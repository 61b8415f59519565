"""Fitting the step model's free parameters to measured runs (``scalelab calibrate``).

The free parameters are the fields of :class:`scalelab.planner.ModelParams`:

- ``bandwidth_efficiency``: fraction of the link bandwidth the exchange achieves,
- ``latency_s``: per-message latency added to the measured link's,
- ``overlap``: fraction of the exchange hidden behind backward,
- ``compute_scale``: factor on the compute time (on top of the contention factor a
  validation measured for the case; runs measured their own compute, so 1 is neutral).

Each observation is one measured case and the inputs the prediction needs (the
``inputs`` of a validation case; for a ``run.json`` its own median compute time, its
parameter bytes and the nominal emulated rate). The fit minimises the sum over
observations of ``log(predicted / measured)^2`` (relative errors, symmetric in over- and
under-prediction) plus ``1e-4`` times the squared distance of each parameter from its
neutral value over its range, so parameters the data cannot tell apart stay neutral
instead of drifting. The minimiser is a bounded pattern search (coordinate steps that
halve when no step improves), started from a few points; the model has four parameters
and each evaluation costs microseconds, so no numerical library is needed.

The calibration file (``scalelab.calibration/1``) holds ``params`` (every ModelParams
field, as ``scalelab plan --calibration`` reads them), the configs it was fitted on
(``fitted_cases``, so ``validate`` can report errors on the other cases) and the fit's
errors before and after.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalelab.errors import UsageError

BOUNDS: dict[str, tuple[float, float]] = {
    "bandwidth_efficiency": (0.05, 1.0),
    "latency_s": (0.0, 0.1),
    "overlap": (0.0, 1.0),
    "compute_scale": (0.25, 4.0),
}
NEUTRAL = {"bandwidth_efficiency": 1.0, "latency_s": 0.0, "overlap": 0.0, "compute_scale": 1.0}
RIDGE = 1e-4


@dataclass(frozen=True)
class Observation:
    config: dict[str, Any]
    inputs: dict[str, Any]
    measured_step_s: float
    source: str = ""


@dataclass
class Fit:
    params: Any  # ModelParams
    free: tuple[str, ...]
    before: dict[str, Any]
    after: dict[str, Any]
    evaluations: int = 0
    per_case: list[dict] = field(default_factory=list)


def observations_from_validation(data: dict, source: str = "") -> list[Observation]:
    out = []
    for c in data.get("cases", []):
        if not (isinstance(c, dict) and isinstance(c.get("inputs"), dict)
                and c.get("measured_step_s")):
            raise UsageError(f"{source}: a validation case lacks inputs or a measured step")
        out.append(Observation(c["config"], c["inputs"], float(c["measured_step_s"]), source))
    return out


def observation_from_run(data: dict, source: str = "") -> Observation:
    """A parameter-server run on an emulated network: its compute, bytes and nominal rate."""
    from scalelab import netem

    try:
        cfg = data["config"]
        steps = data["steps"]
        step_s = steps["step_s"]["median"]
        compute_s = steps["compute_s"]["median"]
    except (KeyError, TypeError):
        raise UsageError(f"{source}: not a complete run (needs config and step medians)") from None
    if cfg.get("architecture") != "ps":
        raise UsageError(f"{source}: an all-reduce run times its exchange inside backward, so "
                         "its compute is unknown; calibrate from a validation file instead")
    if cfg.get("mode", "sync") != "sync":
        raise UsageError(f"{source}: only synchronous runs can be calibrated against")
    rate = cfg.get("emulate_network")
    if not rate:
        raise UsageError(f"{source}: ran on loopback, so its link bandwidth is unknown "
                         "(use runs with --emulate-network, or a validation file)")
    tensor_bytes: list[int] = []
    if cfg.get("partition") == "tensor":
        from scalelab.workload import WorkloadSpec, describe

        tensor_bytes = list(describe(WorkloadSpec.from_dict(cfg["workload"]),
                                     flops=False).tensor_bytes)
    config = {"workers": cfg["workers"], "ps": cfg["ps"], "architecture": "ps",
              "partition": cfg.get("partition", "balanced"), "batch_size": cfg["batch_size"],
              "rate": rate}
    inputs = {"architecture": "ps", "workers": cfg["workers"], "ps": cfg["ps"],
              "partition": config["partition"], "param_bytes": data["param_bytes"],
              "tensor_bytes": tensor_bytes, "compute_s": compute_s, "contention": 1.0,
              "bandwidth_Bps": netem.parse_rate(rate) / 8.0, "latency_s": 0.0,
              "full_duplex": bool(cfg.get("piece_bytes"))}
    return Observation(config, inputs, float(step_s), source)


def load_observations(paths: list[str | Path]) -> list[Observation]:
    """Observations from ``scalelab.validation/1`` and ``scalelab.run/1`` files."""
    from scalelab.results import load_any

    if not paths:
        raise UsageError("calibrate needs at least one run.json or validation.json")
    out: list[Observation] = []
    for p in paths:
        kind, data = load_any(p)
        if kind == "validation":
            out += observations_from_validation(data, str(p))
        elif kind == "run":
            out.append(observation_from_run(data, str(p)))
        else:
            raise UsageError(f"{p}: a {kind} file; calibrate reads run and validation files")
    if not out:
        raise UsageError("the files hold no measured cases")
    return out


def _params(values: dict[str, float]):
    from scalelab.planner import ModelParams

    return ModelParams(**values)


def log_errors(observations: list[Observation], params) -> list[float]:
    from scalelab.validate import predict

    return [math.log(predict(o.inputs, params).step_s / o.measured_step_s)
            for o in observations]


def _objective(observations, values: dict[str, float]) -> float:
    sq = sum(e * e for e in log_errors(observations, _params(values)))
    reg = sum(((values[k] - NEUTRAL[k]) / (hi - lo)) ** 2 for k, (lo, hi) in BOUNDS.items())
    return sq + RIDGE * reg


def _pattern_search(observations, start: dict[str, float], free: tuple[str, ...],
                    budget: int = 4000) -> tuple[dict[str, float], float, int]:
    x = dict(start)
    fx = _objective(observations, x)
    steps = {k: 0.25 * (BOUNDS[k][1] - BOUNDS[k][0]) for k in free}
    evals = 1
    while evals < budget and any(steps[k] > 1e-5 * (BOUNDS[k][1] - BOUNDS[k][0]) for k in free):
        improved = False
        for k in free:
            lo, hi = BOUNDS[k]
            for sign in (1.0, -1.0):
                trial = dict(x)
                trial[k] = min(hi, max(lo, x[k] + sign * steps[k]))
                if trial[k] == x[k]:
                    continue
                ft = _objective(observations, trial)
                evals += 1
                if ft < fx:
                    x, fx, improved = trial, ft, True
                    break
        if not improved:
            for k in free:
                steps[k] /= 2.0
    return x, fx, evals


def summary(errors: list[float]) -> dict[str, Any]:
    """Median and max |relative error| from log errors."""
    rel = [abs(math.exp(e) - 1.0) for e in errors]
    return {"median_abs_error": statistics.median(rel) if rel else None,
            "max_abs_error": max(rel) if rel else None, "cases": len(rel)}


def fit(observations: list[Observation], free: tuple[str, ...] | None = None) -> Fit:
    """Least-squares fit of ``free`` (default: all four) parameters to ``observations``."""
    free = tuple(free or BOUNDS)
    unknown = [k for k in free if k not in BOUNDS]
    if unknown:
        raise UsageError(f"unknown parameter(s) {', '.join(unknown)} (free parameters: "
                         f"{', '.join(BOUNDS)})")
    if not observations:
        raise UsageError("nothing to fit: no measured cases")
    starts = [dict(NEUTRAL)]
    for eff, ov in ((0.7, 0.0), (1.0, 0.5), (0.7, 0.5)):
        s = dict(NEUTRAL)
        if "bandwidth_efficiency" in free:
            s["bandwidth_efficiency"] = eff
        if "overlap" in free:
            s["overlap"] = ov
        if s not in starts:
            starts.append(s)
    best, best_f, evals = None, math.inf, 0
    for s in starts:
        x, fx, n = _pattern_search(observations, s, free)
        evals += n
        if fx < best_f:
            best, best_f = x, fx
    params = _params(best)
    before = log_errors(observations, _params(NEUTRAL))
    after = log_errors(observations, params)
    per_case = [{"config": o.config, "measured_step_s": o.measured_step_s,
                 "error_before": math.exp(b) - 1.0, "error_after": math.exp(a) - 1.0}
                for o, b, a in zip(observations, before, after)]
    return Fit(params, free, summary(before), summary(after), evals, per_case)


def document(result: Fit, observations: list[Observation], sources: list[str]) -> dict:
    """The content of calibration.json."""
    return {
        "params": result.params.to_dict(),
        "free": list(result.free),
        "bounds": {k: list(BOUNDS[k]) for k in result.free},
        "fitted_cases": [o.config for o in observations],
        "sources": sources,
        "before": result.before,
        "after": result.after,
        "per_case": result.per_case,
        "objective": "sum of log(predicted/measured)^2 + 1e-4 * sum of ((p - neutral)/range)^2",
        "underdetermined": len(observations) < len(result.free),
    }
