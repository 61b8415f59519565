"""Predicted against measured: a grid of real runs, each first predicted by the planner.

For every case of a grid (workers, servers, architecture, partition, batch size, emulated
rate) the step is predicted by :func:`scalelab.planner.predict_step` from measurements made
on this machine, then run with :func:`scalelab.runner.run_training` and measured:

- **compute**: one profile of the model (:func:`scalelab.profiler.time_steps`, the one step
  timer) in a lone process with the torch threads a worker of that case gets. A
  parameter-server worker's compute is forward + backward (its servers apply the update);
  an all-reduce worker's is forward + backward + optimizer step.
- **contention**: every emulated host is a process on this one machine, so W workers share
  its cores. The case's W workers are started at once, each timing steps; their median
  compute over the lone one is the contention factor, fed to the planner as
  ``ModelParams.compute_scale`` (times a calibrated ``compute_scale``, 1 by default).
  Both are measured just before each case (``fresh_profiles``), so that load from other
  processes on a shared machine weighs on the prediction as it does on the run.
- **link**: :func:`scalelab.netem.measure_link` on a two-host emulated network of the
  case's rate (bandwidth of one TCP stream, latency from a ping-pong), or the same probe on
  loopback without a rate. Every host's link is shaped, workers and dedicated servers alike,
  so the planner gets that bandwidth for both.
- **exchange form**: the runner sends each shard as one message and the server answers once
  it has every worker's shard, i.e. push then pull (``full_duplex=False``).

The error of a case is ``(predicted - measured) / measured`` of the median step time.
With a calibration (``scalelab calibrate``), each case is predicted twice, with the neutral
and with the calibrated parameters, and the cases the calibration was fitted on are marked
so the errors can be reported on the others.

Python use::

    from scalelab.validate import ValidationOptions, parse_grid, run_validation
    v = run_validation(spec, parse_grid("workers=2 ps=1,2 rate=200mbit batch_size=8"),
                       ValidationOptions(steps=8))
    v["median_abs_error"]
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from scalelab.errors import RunFailure, UsageError
from scalelab.workload import WorkloadSpec

SCHEMA_KIND = "validation"
GRID_KEYS = ("workers", "ps", "architecture", "partition", "batch_size", "rate")
_INT_KEYS = ("workers", "ps", "batch_size")
_CHOICES = {"architecture": ("ps", "allreduce"), "partition": ("balanced", "tensor")}
_DEFAULTS = {"workers": 2, "architecture": "ps", "partition": "balanced", "batch_size": 32}


# ---------------------------------------------------------------------------------------
# The grid


def parse_grid(text: str) -> dict[str, list]:
    """``"workers=2,4 ps=1,2 architecture=ps,allreduce rate=200mbit batch_size=8"``.

    Keys are ``scalelab run`` option names (``batch-size`` or ``batch_size``); values are
    comma-separated. ``rate`` emulates the network (``none`` or leaving it out: loopback).
    """
    from scalelab import netem

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
            if key in _INT_KEYS:
                try:
                    n = int(v)
                except ValueError:
                    raise UsageError(f"grid {key}={v!r}: not an integer") from None
                if n < 1:
                    raise UsageError(f"grid {key}={n}: must be >= 1")
                vals.append(n)
            elif key in _CHOICES:
                if v not in _CHOICES[key]:
                    raise UsageError(f"grid {key}={v!r}: one of {', '.join(_CHOICES[key])}")
                vals.append(v)
            elif v.lower() in ("none", "loopback"):
                vals.append(None)
            else:
                netem.parse_rate(v)
                vals.append(v)
        grid[key] = list(dict.fromkeys(vals))
    if not grid:
        raise UsageError("the grid is empty (example: --grid \"workers=2,4 ps=1,2\")")
    return grid


def expand(grid: dict[str, list]) -> list[dict[str, Any]]:
    """Every combination, as ``config`` dicts; all-reduce cases have no servers (deduped)."""
    keys = list(GRID_KEYS)
    axes = [grid.get(k, [_DEFAULTS.get(k)] if k != "ps" else [None]) for k in keys]
    cases, seen = [], set()
    for combo in itertools.product(*axes):
        c = dict(zip(keys, combo))
        if c["architecture"] == "allreduce":
            c["ps"] = None
            c["partition"] = None
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
    if key["architecture"] == "allreduce":
        key["ps"] = key["partition"] = None
    return tuple(key.items())


# ---------------------------------------------------------------------------------------
# Measurements on this machine


@dataclass(frozen=True)
class ValidationOptions:
    steps: int = 10
    warmup_steps: int = 2
    profile_steps: int = 5
    probe_seconds: float = 1.0
    timeout_s: float = 120.0
    seed: int = 0
    fresh_profiles: bool = True

    def __post_init__(self):
        if self.steps < 2:
            raise UsageError(f"--steps must be >= 2, got {self.steps}")
        if not 0 <= self.warmup_steps < self.steps:
            raise UsageError(f"warm-up steps must be in [0, steps), got {self.warmup_steps}")
        if self.profile_steps < 1:
            raise UsageError(f"profile steps must be >= 1, got {self.profile_steps}")
        if not self.probe_seconds > 0 or not self.timeout_s > 0:
            raise UsageError("probe seconds and timeout must be > 0")


def worker_threads(workers: int) -> int:
    """Torch threads the local launcher gives each worker (as the runner does)."""
    from scalelab.runner.launch import cpu_count

    return max(1, cpu_count() // workers)


def time_concurrently(spec: WorkloadSpec, batch_size: int, processes: int, threads: int,
                      steps: int, seed: int = 0, timeout_s: float = 300.0) -> list[dict]:
    """Time ``steps`` training steps in ``processes`` processes at once; one dict each.

    Every process builds the model and warms up, then all start timing together (a line on
    their standard input), so the timed steps overlap. Each runs in a session of its own, as
    the runner's ranks do, so the scheduler shares the cores between them as in a run.
    """
    cmd = [sys.executable, "-m", "scalelab.validate", "--time-steps",
           json.dumps(spec.to_dict()), str(batch_size), str(threads), str(steps), str(seed)]
    # each in its own session, as the runner starts its ranks: with the kernel's session
    # autogroups, processes of one session share one group's CPU time
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
             for _ in range(processes)]
    try:
        for p in procs:
            line = p.stdout.readline().strip()
            if line != "ready":
                err = p.stderr.read().strip().splitlines()[-1:] if p.poll() is not None else ""
                raise RunFailure(f"step timing process failed to start: {err or line!r}")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        out = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout_s)
            if p.returncode != 0:
                raise RunFailure("step timing process failed: "
                                 f"{(stderr.strip().splitlines() or ['?'])[-1]}")
            out.append(json.loads(stdout.strip().splitlines()[-1]))
        return out
    except subprocess.TimeoutExpired:
        raise RunFailure(f"step timing took longer than {timeout_s:.0f} s") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _compute_of(timing: dict, architecture: str) -> float:
    if architecture == "ps":
        return timing["forward_s"] + timing["backward_s"]
    return timing["step_s"]


class Measurements:
    """Lone profiles, contention factors and links, measured when first needed and cached.

    :meth:`begin_case` forgets the compute measurements (not the links), so that a case's
    profile and contention are measured in the minute before it runs, under the same load
    from other processes on this machine; ``profiles`` keeps every one measured.
    """

    def __init__(self, spec: WorkloadSpec, options: ValidationOptions, say=None):
        self.spec, self.options = spec, options
        self.say = say or (lambda msg: None)
        self.lone: dict[tuple[int, int], dict] = {}
        self.crowd: dict[tuple[int, int], list[dict]] = {}
        self.links: dict[str | None, dict] = {}
        self.profiles: list[dict] = []

    def begin_case(self) -> None:
        if self.options.fresh_profiles:
            self.lone.clear()
            self.crowd.clear()

    def lone_timing(self, batch_size: int, threads: int) -> dict:
        key = (batch_size, threads)
        if key not in self.lone:
            self.say(f"profiling batch {batch_size} on {threads} thread(s)")
            self.lone[key] = time_concurrently(self.spec, batch_size, 1, threads,
                                               self.options.profile_steps, self.options.seed)[0]
            self.profiles.append({"batch_size": batch_size, **self.lone[key]})
        return self.lone[key]

    def contended_timings(self, batch_size: int, workers: int) -> list[dict]:
        key = (batch_size, workers)
        if key not in self.crowd:
            if workers == 1:
                self.crowd[key] = [self.lone_timing(batch_size, worker_threads(1))]
            else:
                self.say(f"timing {workers} workers at once (contention), batch {batch_size}")
                self.crowd[key] = time_concurrently(
                    self.spec, batch_size, workers, worker_threads(workers),
                    self.options.profile_steps, self.options.seed)
        return self.crowd[key]

    def contention(self, batch_size: int, workers: int, architecture: str) -> float:
        lone = _compute_of(self.lone_timing(batch_size, worker_threads(workers)), architecture)
        crowd = [_compute_of(t, architecture)
                 for t in self.contended_timings(batch_size, workers)]
        return statistics.median(crowd) / lone

    def link(self, rate: str | None) -> dict:
        if rate not in self.links:
            from scalelab import netem

            self.say(f"measuring the link ({rate or 'loopback'})")
            if rate is None:
                self.links[rate] = netem.measure_loopback(self.options.probe_seconds)
            else:
                with netem.emulated_network(2, rate) as net:
                    self.links[rate] = netem.measure_link(net, self.options.probe_seconds)
        return self.links[rate]


# ---------------------------------------------------------------------------------------
# Prediction


def prediction_inputs(config: dict[str, Any], meas: Measurements, info) -> dict[str, Any]:
    """Everything :func:`predict` needs for one case, as plain numbers (kept in the file)."""
    arch, w, b = config["architecture"], config["workers"], config["batch_size"]
    lone = meas.lone_timing(b, worker_threads(w))
    link = meas.link(config.get("rate"))
    return {
        "architecture": arch, "workers": w, "ps": config.get("ps") or 0,
        "partition": config.get("partition") or "balanced",
        "param_bytes": info.param_bytes,
        "tensor_bytes": list(info.tensor_bytes) if config.get("partition") == "tensor" else [],
        "compute_s": _compute_of(lone, arch),
        "contention": meas.contention(b, w, arch),
        "bandwidth_Bps": link["bandwidth_Bps"], "latency_s": link["latency_s"],
        "full_duplex": False,
    }


def predict(inputs: dict[str, Any], params=None):
    """The planner's step for one case's inputs; ``params`` a ``ModelParams`` (neutral)."""
    from scalelab.planner import ModelParams, StepWorkload, predict_step

    params = params or ModelParams()
    scaled = ModelParams(**{**params.to_dict(),
                            "compute_scale": params.compute_scale * inputs["contention"]})
    workload = StepWorkload(param_bytes=inputs["param_bytes"], compute_s=inputs["compute_s"],
                            tensor_bytes=tuple(inputs.get("tensor_bytes") or ()))
    latency = inputs["latency_s"] + params.latency_s
    return predict_step(workload, architecture=inputs["architecture"], workers=inputs["workers"],
                        num_ps=inputs["ps"] or 1, partition=inputs["partition"],
                        worker_bandwidth_Bps=inputs["bandwidth_Bps"],
                        ps_bandwidth_Bps=inputs["bandwidth_Bps"], latency_s=latency,
                        params=scaled, full_duplex=bool(inputs.get("full_duplex")))


def _median(steps: dict, name: str) -> float | None:
    s = steps.get(name)
    return s["median"] if isinstance(s, dict) else None


def measured_parts(run: dict) -> dict[str, float | None]:
    """Median step, compute and exchange of a run (all-reduce: exchange is inside backward)."""
    steps = run["steps"]
    arch = run["config"]["architecture"]
    return {
        "step_s": _median(steps, "step_s"),
        "compute_s": _median(steps, "compute_s") if arch == "ps" else None,
        "exchange_s": _median(steps, "exchange_s") if arch == "ps" else None,
        "samples_per_s": run.get("samples_per_s"),
    }


def relative_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def error_summary(cases: list[dict], field: str = "error") -> dict[str, float | int | None]:
    errs = [abs(c[field]) for c in cases if c.get(field) is not None]
    if not errs:
        return {"median_abs_error": None, "max_abs_error": None, "cases": 0}
    return {"median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
            "cases": len(errs)}


# ---------------------------------------------------------------------------------------
# The validation


def run_validation(spec: WorkloadSpec, grid: dict[str, list], options: ValidationOptions,
                   calibration: dict | None = None,
                   say: Callable[[str], None] | None = None,
                   on_case: Callable[[dict], None] | None = None) -> dict:
    """Predict, run and measure every case of ``grid``; the content of validation.json.

    ``calibration``: a loaded ``scalelab.calibration/1`` file; cases are then also predicted
    with its parameters, and those it was fitted on are marked ``used_for_fitting``.
    """
    return run_cases(spec, expand(grid), options, calibration, say, on_case)


def run_cases(spec: WorkloadSpec, configs: list[dict[str, Any]], options: ValidationOptions,
              calibration: dict | None = None,
              say: Callable[[str], None] | None = None,
              on_case: Callable[[dict], None] | None = None) -> dict:
    """:func:`run_validation` for an explicit list of ``config`` dicts (grid keys)."""
    from scalelab import netem
    from scalelab.planner import ModelParams
    from scalelab.runner import RunConfig, run_training
    from scalelab.workload import describe

    configs = [{**dict.fromkeys(GRID_KEYS), **c} for c in configs]
    for c in configs:  # every case must be a valid run before anything is started
        _run_config(spec, c, options, RunConfig)
    if any(c.get("rate") for c in configs):
        netem.check_available()
    say = say or (lambda msg: None)
    info = describe(spec, flops=False)
    meas = Measurements(spec, options, say)
    cal_params = fitted = None
    if calibration is not None:
        cal_params = ModelParams.from_dict(calibration["params"])
        fitted = {config_key(c) for c in calibration.get("fitted_cases", [])}
    cases = []
    for i, config in enumerate(configs):
        meas.begin_case()
        inputs = prediction_inputs(config, meas, info)
        pred = predict(inputs)
        say(f"case {i + 1}/{len(configs)}: {describe_config(config)}")
        run = run_training(_run_config(spec, config, options, RunConfig))
        got = measured_parts(run)
        if not got["step_s"]:
            raise RunFailure(f"case {describe_config(config)}: the run reported no step time")
        case = {
            "config": config,
            "predicted_step_s": pred.step_s,
            "measured_step_s": got["step_s"],
            "error": relative_error(pred.step_s, got["step_s"]),
            "predicted_compute_s": pred.compute_s,
            "measured_compute_s": got["compute_s"],
            "predicted_exchange_s": pred.comm_s,
            "measured_exchange_s": got["exchange_s"],
            "predicted_samples_per_s": config["workers"] * config["batch_size"] / pred.step_s,
            "measured_samples_per_s": got["samples_per_s"],
            "bottleneck": pred.bottleneck,
            "form": pred.form,
            "inputs": inputs,
            "achieved_bandwidth_Bps": run.get("achieved_bandwidth_Bps"),
            "steps_timed": run["steps"]["step_s"]["n"],
            "model": spec.model,
            "one_worker_step_s": meas.lone_timing(config["batch_size"], 1)["step_s"],
        }
        if cal_params is not None:
            cal = predict(inputs, cal_params)
            case["calibrated_step_s"] = cal.step_s
            case["calibrated_error"] = relative_error(cal.step_s, got["step_s"])
            case["used_for_fitting"] = config_key(config) in fitted
        cases.append(case)
        if on_case:
            on_case(case)
    return summarize(spec, cases, meas, calibration)


def summarize(spec: WorkloadSpec, cases: list[dict], meas: Measurements,
              calibration: dict | None) -> dict:
    """validation.json content for ``cases`` (the errors and what was measured)."""
    from scalelab import netem

    result = {
        "workload": spec.to_dict(),
        "cases": cases,
        **{k: v for k, v in error_summary(cases).items() if k != "cases"},
        "link": {(netem.format_rate(netem.parse_rate(r)) if r else "loopback"): v
                 for r, v in meas.links.items()},
        "profile": meas.profiles,
        "contention": [{"batch_size": c["config"]["batch_size"],
                        "workers": c["config"]["workers"],
                        "architecture": c["config"]["architecture"],
                        "factor": c["inputs"]["contention"]} for c in cases],
        "exchange_form": "push-then-pull (half-duplex)",
    }
    if calibration is not None:
        held = [c for c in cases if not c.get("used_for_fitting")]
        result["calibration"] = {
            "params": calibration["params"],
            "held_out_before": error_summary(held),
            "held_out_after": error_summary(held, "calibrated_error"),
            "all_after": error_summary(cases, "calibrated_error"),
        }
    return result


def _run_config(spec, config, options: ValidationOptions, RunConfig):
    return RunConfig(
        workload=spec, workers=config["workers"], ps=config.get("ps"),
        architecture=config["architecture"], batch_size=config["batch_size"],
        steps=options.steps, warmup_steps=options.warmup_steps,
        partition=config.get("partition") or "balanced", emulate_network=config.get("rate"),
        timeout_s=options.timeout_s, seed=options.seed)


def describe_config(config: dict[str, Any]) -> str:
    parts = [f"{config['architecture']}", f"W={config['workers']}"]
    if config["architecture"] == "ps":
        parts.append(f"P={config['ps']}")
        if config.get("partition") == "tensor":
            parts.append("tensor")
    parts.append(f"b={config['batch_size']}")
    parts.append(config.get("rate") or "loopback")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------
# The figure


def _speedup_series(validation: dict) -> dict[tuple, list[tuple[int, float, float]]]:
    """(workers, predicted, measured speedup) per series.

    Speedup is samples/s over those of one worker alone on one thread (its whole step,
    update included): a fixed unit of this machine, whatever threads a case's workers get.
    """
    series: dict[tuple, list] = {}
    for c in validation["cases"]:
        cfg = c["config"]
        t1 = c.get("one_worker_step_s")
        if not t1:
            continue
        key = (c.get("model", ""), cfg["architecture"], cfg.get("ps"), cfg.get("partition"),
               cfg["batch_size"], cfg.get("rate"))
        w = cfg["workers"]
        series.setdefault(key, []).append(
            (w, w * t1 / c["predicted_step_s"], w * t1 / c["measured_step_s"]))
    return {k: sorted(v) for k, v in series.items()}


def plot(validation: dict, path: str) -> None:
    """Predicted against measured step time (y = x), and speedup against workers."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from scalelab.results import write_text_atomic

    cases = validation["cases"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    colors = {"ps": "#3b6fb6", "allreduce": "#2a9d8f"}
    for arch in ("ps", "allreduce"):
        sel = [c for c in cases if c["config"]["architecture"] == arch]
        if sel:
            ax1.scatter([c["predicted_step_s"] * 1e3 for c in sel],
                        [c["measured_step_s"] * 1e3 for c in sel], s=36, zorder=3,
                        color=colors[arch], label=f"{arch} (uncalibrated)")
        cal = [c for c in sel if c.get("calibrated_step_s")]
        if cal:
            ax1.scatter([c["calibrated_step_s"] * 1e3 for c in cal],
                        [c["measured_step_s"] * 1e3 for c in cal], s=36, zorder=3,
                        facecolors="none", edgecolors=colors[arch], label=f"{arch} (calibrated)")
    vals = ([c["predicted_step_s"] * 1e3 for c in cases] + [c["measured_step_s"] * 1e3
                                                            for c in cases]
            + [c["calibrated_step_s"] * 1e3 for c in cases if c.get("calibrated_step_s")])
    lo, hi = min(vals) / 1.2, max(vals) * 1.2
    ax1.plot([lo, hi], [lo, hi], color="#6b7280", linewidth=1, label="y = x")
    ax1.fill_between([lo, hi], [lo / 1.1, hi / 1.1], [lo * 1.1, hi * 1.1], color="#e5e7eb",
                     alpha=0.7, label="±10%")
    if hi / lo > 10:
        ax1.set_xscale("log")
        ax1.set_yscale("log")
        for axis in (ax1.xaxis, ax1.yaxis):
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax1.set_xlim(lo, hi)
    ax1.set_ylim(lo, hi)
    ax1.set_xlabel("predicted step time (ms)")
    ax1.set_ylabel("measured step time (ms)")
    med, mx = validation.get("median_abs_error"), validation.get("max_abs_error")
    ax1.set_title(f"Predicted vs measured (median |err| {med:.0%}, max {mx:.0%})"
                  if med is not None else "Predicted vs measured")
    ax1.legend(fontsize=7, frameon=False, loc="upper left")
    palette = plt.get_cmap("tab10")
    for i, (key, pts) in enumerate(sorted(_speedup_series(validation).items(), key=str)):
        model, arch, ps, part, b, rate = key
        label = " ".join(x for x in (model.rpartition(":")[2], arch, f"P={ps}" if ps else "",
                                     "tensor" if part == "tensor" else "", f"b={b}",
                                     rate or "loopback") if x)
        color = palette(i % 10)
        ws = [1] + [p[0] for p in pts]
        ax2.plot(ws, [1.0] + [p[1] for p in pts], color=color, linewidth=1.4, label=label)
        ax2.scatter([p[0] for p in pts], [p[2] for p in pts], color=color, s=30, zorder=3)
    ax2.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax2.set_xlabel("workers")
    ax2.set_ylabel("speedup over one single-thread worker")
    ax2.set_title("Speedup: predicted (lines), measured (points)")
    ax2.legend(fontsize=6, frameon=False)
    for ax in (ax1, ax2):
        ax.grid(True, color="#e5e7eb", linewidth=0.8)
        ax.set_axisbelow(True)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, facecolor="white")
    plt.close(fig)
    write_text_atomic(path, buf.getvalue())


# ---------------------------------------------------------------------------------------
# The step-timing child process


def _time_steps_child(spec_json: str, batch_size: int, threads: int, steps: int,
                      seed: int) -> None:
    import torch

    from scalelab.profiler import time_steps

    torch.set_num_threads(threads)
    spec = WorkloadSpec.from_dict(json.loads(spec_json))
    model = spec.build_model(seed=seed)
    time_steps(spec, model, batch_size, warmup=1, steps=1, seed=seed)
    print("ready", flush=True)
    sys.stdin.readline()
    t = time_steps(spec, model, batch_size, warmup=1, steps=steps, seed=seed)
    print(json.dumps({**asdict(t), "threads": threads}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--time-steps":
        _time_steps_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                          int(sys.argv[6]))
    else:
        print("usage: python -m scalelab.validate --time-steps SPEC_JSON BATCH THREADS STEPS "
              "SEED", file=sys.stderr)
        raise SystemExit(2)
