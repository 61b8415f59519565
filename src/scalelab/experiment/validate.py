"""Predicted against measured: a grid of real runs, each first predicted by the step model.

For every case of a grid (workers, servers, architecture, partition, batch size, emulated
rate) the step is predicted by :func:`scalelab.experiment.case.predict_case` from
measurements made on this machine (:mod:`scalelab.experiment.measure`: the lone compute,
the contention between the case's workers, the link), then run with
:func:`scalelab.runner.run_training` and measured. The exchange form the prediction uses is
the run's own statement of it, ``RunConfig.exchange_form``.

The error of a case is ``(predicted - measured) / measured`` of the median step time.
With a calibration (``scalelab calibrate``), each case is predicted twice, with the
uncalibrated and with the calibration's chosen parameters, and the cases the calibration
was fitted on are marked so the errors can be reported on the others.

Python use::

    from scalelab.experiment.validate import ValidationOptions, parse_grid, run_validation
    v = run_validation(spec, parse_grid("workers=2 ps=1,2 rate=200mbit batch_size=8"),
                       ValidationOptions(steps=8))
    v.median_abs_error, v.to_dict()
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scalelab.errors import RunFailure, UsageError
from scalelab.experiment.case import (
    CaseInputs,
    error_summary,
    predict_case,
    relative_error,
)
from scalelab.experiment.measure import Measurements, case_inputs, measured_parts
from scalelab.theory import amdahl
from scalelab.workload import WorkloadSpec

SCHEMA_KIND = "validation"
GRID_KEYS = ("workers", "ps", "architecture", "partition", "batch_size", "rate",
             "ps_placement", "zero")
_INT_KEYS = ("workers", "ps", "batch_size")
_CHOICES = {"architecture": ("ps", "allreduce", "fsdp"), "partition": ("balanced", "tensor"),
            "ps_placement": ("dedicated", "colocated")}
# keys a case's config carries only when the grid names them (older files have none)
_OPTIONAL_KEYS = ("ps_placement", "zero")
_DEFAULTS = {"workers": 2, "architecture": "ps", "partition": "balanced", "batch_size": 32}


# ---------------------------------------------------------------------------------------
# The grid


def _grid_value(key: str, v: str, item: str):
    from scalelab import netem

    if key == "zero":  # the ZeRO level of architecture=fsdp cases (run --zero)
        if v not in ("1", "2", "3"):
            raise UsageError(f"grid zero={v!r}: one of 1, 2, 3")
        return int(v)
    if key in _INT_KEYS:
        try:
            n = int(v)
        except ValueError:
            raise UsageError(f"grid {key}={v!r}: not an integer") from None
        if n < 1:
            raise UsageError(f"grid {key}={n}: must be >= 1")
        return n
    if key in _CHOICES:
        if v not in _CHOICES[key]:
            raise UsageError(f"grid {key}={v!r}: one of {', '.join(_CHOICES[key])}")
        return v
    if v.lower() in ("none", "loopback"):
        return None
    netem.parse_rate(v)
    return v


def parse_grid(text: str) -> dict[str, list]:
    """``"workers=2,4 ps=1,2 architecture=ps,allreduce rate=200mbit batch_size=8"``.

    Keys are ``scalelab run`` option names (``batch-size`` or ``batch_size``); values are
    comma-separated. ``rate`` emulates the network (``none`` or leaving it out: loopback).
    """
    grid: dict[str, list] = {}
    for item in str(text).split():
        key, sep, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not values:
            raise UsageError(f"grid item {item!r} is not KEY=V1,V2 (keys: {', '.join(GRID_KEYS)})")
        if key not in GRID_KEYS:
            raise UsageError(f"unknown grid key {key!r} (keys: {', '.join(GRID_KEYS)})")
        if key in grid:
            raise UsageError(f"grid key {key!r} given twice")
        vals: list = []
        for v in values.split(","):
            v = v.strip()
            if not v:
                raise UsageError(f"grid item {item!r} has an empty value")
            vals.append(_grid_value(key, v, item))
        grid[key] = list(dict.fromkeys(vals))
    if not grid:
        raise UsageError("the grid is empty (example: --grid \"workers=2,4 ps=1,2\")")
    return grid


def expand(grid: dict[str, list]) -> list[dict[str, Any]]:
    """Every combination, as ``config`` dicts; all-reduce cases have no servers (deduped).
    ``ps_placement=colocated`` puts server k on worker host k mod W (the runner's
    ``--ps-placement colocated``)."""
    keys = [k for k in GRID_KEYS if k not in _OPTIONAL_KEYS or k in grid]
    axes = [grid.get(k, [_DEFAULTS.get(k)] if k != "ps" else [None]) for k in keys]
    cases, seen = [], set()
    for combo in itertools.product(*axes):
        c = dict(zip(keys, combo))
        if "zero" in c:  # a ZeRO level only for sharded cases, 3 (run's default) unless given
            c["zero"] = (c["zero"] or 3) if c["architecture"] == "fsdp" else None
        elif c["architecture"] == "fsdp":
            c["zero"] = 3
        if c["architecture"] in ("allreduce", "fsdp"):
            c["ps"] = None
            c["partition"] = None
            if "ps_placement" in c:
                c["ps_placement"] = None
        elif c["ps"] is None:
            c["ps"] = 1
        key = tuple(c.items())
        if key not in seen:
            seen.add(key)
            cases.append(c)
    return cases


def config_key(config: dict[str, Any]) -> tuple:
    """Identity of a case (the grid's keys only, rates in bits/s), to match fitted cases."""
    from scalelab import netem

    key = {k: config.get(k) for k in GRID_KEYS}
    if key["rate"]:
        key["rate"] = netem.parse_rate(key["rate"])
    if key["architecture"] in ("allreduce", "fsdp"):
        key["ps"] = key["partition"] = None
    if key["architecture"] != "fsdp":
        key["zero"] = None
    if key["ps_placement"] == "dedicated":
        key["ps_placement"] = None  # the default, as files without the key have it
    return tuple(key.items())


def describe_config(config: dict[str, Any]) -> str:
    parts = [f"{config['architecture']}", f"W={config['workers']}"]
    if config["architecture"] == "fsdp":
        parts.append(f"ZeRO-{config.get('zero') or 3}")
    if config["architecture"] == "ps":
        parts.append(f"P={config['ps']}")
        if config.get("ps_placement") == "colocated":
            parts.append("colocated")
        if config.get("partition") == "tensor":
            parts.append("tensor")
    parts.append(f"b={config['batch_size']}")
    parts.append(config.get("rate") or "loopback")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------
# Options and results


@dataclass(frozen=True)
class ValidationOptions:
    steps: int = 10
    """Timed steps of every run (after the warm-up)."""
    warmup_steps: int = 2
    """Untimed steps before them."""
    profile_steps: int = 5
    """Steps timed for a case's lone profile and its contention."""
    probe_seconds: float = 1.0
    """Seconds the link probe streams, s."""
    timeout_s: float = 120.0
    """Limit on every wait of a run, s."""
    seed: int = 0
    """Seed of the models and data."""
    fresh_profiles: bool = True
    """Profile and contention timed again just before each case."""
    algorithm: str = "default"
    """Computation configuration of every run and timing (``scalelab run --algorithm``)."""

    def __post_init__(self):
        from scalelab.algorithm_names import parse

        parse(self.algorithm)
        if self.steps < 2:
            raise UsageError(f"--steps must be >= 2, got {self.steps}")
        if not 0 <= self.warmup_steps < self.steps:
            raise UsageError(f"warm-up steps must be in [0, steps), got {self.warmup_steps}")
        if self.profile_steps < 1:
            raise UsageError(f"profile steps must be >= 1, got {self.profile_steps}")
        from scalelab.runner.config import check_timeout_s

        if not 0 < self.probe_seconds < float("inf"):
            raise UsageError(f"probe seconds must be > 0 and finite, got {self.probe_seconds}")
        check_timeout_s(self.timeout_s)

    def measurements(self, spec: WorkloadSpec, say=None) -> Measurements:
        return Measurements(spec, self.profile_steps, self.probe_seconds, self.seed,
                            self.fresh_profiles, say, algorithm=self.algorithm)

    def to_dict(self) -> dict[str, Any]:
        """validation.json's ``options``: among them ``fresh_profiles`` (false under
        ``--reuse-profiles``: each batch size's profile and contention timed once)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ValidationCase:
    """One case of validation.json: predicted and measured (times in s, rates in samples/s)."""

    config: dict[str, Any]
    predicted_step_s: float
    measured_step_s: float
    error: float
    """(predicted - measured) / measured of the step time."""
    predicted_compute_s: float
    measured_compute_s: float | None
    predicted_exchange_s: float
    measured_exchange_s: float | None
    predicted_samples_per_s: float
    measured_samples_per_s: float | None
    bottleneck: str
    form: str
    """The exchange form the prediction used."""
    inputs: CaseInputs
    achieved_bandwidth_Bps: float | None
    steps_timed: int
    model: str
    one_worker_step_s: float
    """One worker alone on one thread, its whole step (the speedup's unit), s."""
    calibrated_step_s: float | None = None
    calibrated_error: float | None = None
    used_for_fitting: bool | None = None
    calibrated_band_s: tuple[float, float] | None = None
    """The calibration's band around ``calibrated_step_s``, seconds."""

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["inputs"] = self.inputs.to_dict()
        for k in ("calibrated_step_s", "calibrated_error", "used_for_fitting",
                  "calibrated_band_s"):
            if d[k] is None:
                del d[k]
        if self.calibrated_band_s is not None:
            d["calibrated_band_s"] = list(self.calibrated_band_s)
        return d


@dataclass(frozen=True)
class Validation:
    """validation.json: every case, the errors, and what was measured on the way."""

    workload: dict[str, Any]
    cases: tuple[ValidationCase, ...]
    median_abs_error: float | None
    max_abs_error: float | None
    link: dict[str, dict]
    """Measured links by rate ('loopback' without one): bandwidth_Bps, latency_s."""
    profile: list[dict]
    contention: list[dict]
    exchange_form: str
    calibration: dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    """What the runs and timings were made under (:meth:`ValidationOptions.to_dict`)."""

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["cases"] = [c.to_dict() for c in self.cases]
        for key in ("calibration", "options"):
            if d[key] is None:
                del d[key]
        return d


# ---------------------------------------------------------------------------------------
# The validation


def run_validation(spec: WorkloadSpec, grid: dict[str, list], options: ValidationOptions,
                   calibration=None, say: Callable[[str], None] | None = None,
                   on_case: Callable[[ValidationCase], None] | None = None) -> Validation:
    """Predict, run and measure every case of ``grid``.

    ``calibration``: a :class:`scalelab.experiment.calibrate.Calibration` (or a loaded
    ``scalelab.calibration/1`` dict); cases are then also predicted with the model it
    chose, and those it was fitted on are marked ``used_for_fitting``.
    """
    return run_cases(spec, expand(grid), options, calibration, say, on_case)


def _run_config(spec, config, options: ValidationOptions):
    from scalelab.runner import RunConfig

    return RunConfig(
        workload=spec, workers=config["workers"], ps=config.get("ps"),
        architecture=config["architecture"], batch_size=config["batch_size"],
        steps=options.steps, warmup_steps=options.warmup_steps,
        partition=config.get("partition") or "balanced", emulate_network=config.get("rate"),
        colocate=config.get("ps_placement") == "colocated",
        shard_level=config.get("zero") or 3,
        timeout_s=options.timeout_s, seed=options.seed,
        # the cases' compute and contention are measured on this machine's CPU cores, so
        # the runs that check them train there too (a GPU validation would need both)
        device="cpu", algorithm=options.algorithm)


def _one_case(spec, config, options, meas: Measurements, info, calibration,
              fitted: set) -> ValidationCase:
    from scalelab.runner import run_training

    run_config = _run_config(spec, config, options)
    inputs = case_inputs(config, run_config.exchange_form, meas, info)
    pred = predict_case(inputs)
    run = run_training(run_config)
    got = measured_parts(run)
    if not got["step_s"]:
        raise RunFailure(f"case {describe_config(config)}: the run reported no step time")
    cal = {}
    if calibration is not None:
        cal_step = predict_case(inputs, calibration.params).step_s
        cal = {"calibrated_step_s": cal_step,
               "calibrated_error": relative_error(cal_step, got["step_s"]),
               "used_for_fitting": config_key(config) in fitted,
               "calibrated_band_s": calibration.band.time_s(cal_step) if calibration.band
               else None}
    return ValidationCase(
        config=config, predicted_step_s=pred.step_s, measured_step_s=got["step_s"],
        error=relative_error(pred.step_s, got["step_s"]), predicted_compute_s=pred.compute_s,
        measured_compute_s=got["compute_s"], predicted_exchange_s=pred.comm_s,
        measured_exchange_s=got["exchange_s"],
        predicted_samples_per_s=amdahl.weak_throughput(config["workers"],
                                                       config["batch_size"], pred.step_s),
        measured_samples_per_s=got["samples_per_s"], bottleneck=pred.bottleneck,
        form=pred.form, inputs=inputs,
        achieved_bandwidth_Bps=run.get("achieved_bandwidth_Bps"),
        steps_timed=run["steps"]["step_s"]["n"], model=spec.model,
        one_worker_step_s=meas.lone_timing(config["batch_size"], 1)["step_s"], **cal)


def _as_calibration(calibration):
    if calibration is None or not isinstance(calibration, dict):
        return calibration
    from scalelab.experiment.calibrate import Calibration

    return Calibration.from_dict(calibration)


def run_cases(spec: WorkloadSpec, configs: list[dict[str, Any]], options: ValidationOptions,
              calibration=None, say: Callable[[str], None] | None = None,
              on_case: Callable[[ValidationCase], None] | None = None) -> Validation:
    """:func:`run_validation` for an explicit list of ``config`` dicts (grid keys)."""
    from scalelab import netem
    from scalelab.opcount import describe

    configs = [{**dict.fromkeys(GRID_KEYS), **c} for c in configs]
    run_configs = [_run_config(spec, c, options) for c in configs]  # all valid before any run
    if any(c.get("rate") for c in configs):
        netem.check_available()
    calibration = _as_calibration(calibration)
    say = say or (lambda msg: None)
    info = describe(spec, flops=False)
    meas = options.measurements(spec, say)
    fitted = ({config_key(c) for c in calibration.fitted_cases}
              if calibration is not None else set())
    cases = []
    for i, config in enumerate(configs):
        meas.begin_case()
        say(f"case {i + 1}/{len(configs)}: {describe_config(config)}")
        case = _one_case(spec, config, options, meas, info, calibration, fitted)
        cases.append(case)
        if on_case:
            on_case(case)
    forms = list(dict.fromkeys(rc.exchange_form for rc in run_configs))
    return summarize(spec, cases, meas, calibration, "; ".join(forms), options)


def summarize(spec: WorkloadSpec, cases: list[ValidationCase], meas: Measurements,
              calibration, exchange_form: str,
              options: ValidationOptions | None = None) -> Validation:
    """The :class:`Validation` of ``cases`` (the errors and what was measured)."""
    from scalelab import netem

    rows = [c.to_dict() for c in cases]
    overall = error_summary(rows)
    summary = None
    if calibration is not None:
        held = [c for c in rows if not c.get("used_for_fitting")]
        summary = {
            "params": calibration.params.to_dict(),
            "model": calibration.model,
            "reason": calibration.reason,
            "band": calibration.band.to_dict() if calibration.band else None,
            "held_out_before": error_summary(held),
            "held_out_after": error_summary(held, "calibrated_error"),
            "all_after": error_summary(rows, "calibrated_error"),
            "inside_band": sum(c["calibrated_band_s"][0] <= c["measured_step_s"]
                               <= c["calibrated_band_s"][1]
                               for c in rows if c.get("calibrated_band_s")),
        }
    return Validation(
        workload=spec.to_dict(), cases=tuple(cases),
        median_abs_error=overall["median_abs_error"], max_abs_error=overall["max_abs_error"],
        link={(netem.format_rate(netem.parse_rate(r)) if r else "loopback"): v
              for r, v in meas.links.items()},
        profile=meas.profiles,
        contention=[{"batch_size": c.config["batch_size"], "workers": c.config["workers"],
                     "architecture": c.config["architecture"],
                     "factor": c.inputs.contention,
                     "floor_step_s": c.inputs.floor_step_s,
                     "compute_floor_s": c.inputs.compute_floor_s} for c in cases],
        exchange_form=exchange_form, calibration=summary,
        options=options.to_dict() if options is not None else None)
