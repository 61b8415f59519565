"""Naive against recommended, measured: the paper's guidelines applied one at a time.

The baseline is what a practitioner starts from unadvised: per-worker batch 16, one
parameter server, whole-tensor placement, the default computation configuration and no
loader processes (:data:`BASELINE`; a TOML file overrides any key). The recommended
configuration is what :func:`scalelab.plan.plan` recommends for the same workers on the
measured link. From the baseline the recommendations are applied in the paper's order
(:data:`ORDER`: minibatch and computation algorithm; loader processes; number of parameter
servers; balanced shards); every configuration is predicted with
:func:`scalelab.plan.step.predict_step` and trained for real with
:func:`scalelab.runner.run_training` (on an emulated network when a rate is given).

Measured here, by the pieces :mod:`scalelab.experiment.validate` uses for its grids
(:mod:`scalelab.experiment.measure`): the link (:func:`scalelab.netem.measure_link`, or
loopback), a worker's compute with the runner's thread split and its contention factor (W
workers timing steps at once on this host), and the one-device profile
(:func:`scalelab.profiler.run_profile`) whose recommended batch the planner starts from.
The plan gets the measured link (bytes/s), the worker's measured compute at the
recommended batch (a run's compute here, contention included) as its compute time, and the
runner's exchange form (``RunConfig.exchange_form``). Each step is
predicted by :func:`scalelab.experiment.case.predict_case` (the planner's
:func:`~scalelab.plan.step.predict_step`) and its error is
``(predicted - measured) / measured`` of samples/s.

Real data (``data``, an image folder): the profile also times the input pipeline, so the
plan recommends ``ceil(t_load / T_C)`` loader processes per worker; the baseline decodes in
each worker (none) and the ``loaders`` step runs the plan's count, all on the folder
(``RunConfig.data``). Each prediction adds the input time a worker waits for
(:func:`scalelab.experiment.loaders.exposed_input_s`), from:

- ``t_load`` at the step's batch, ``b x load_s_per_sample``, times the case's contention:
  decoding is CPU work on the cores the workers compute on, slowed as their compute is;
- the step predicted without input, and the host's cores over its workers: a worker's
  core is busy while it computes and free while it waits for the exchange, and its loaders
  decode whenever a core is free (:func:`scalelab.theory.io.shared_cores_step_s`: the
  step is the largest of the step without input, the loaders' delivery interval and the
  time the worker's cores take for its compute plus the decoding). Without loaders the
  worker decodes before it computes, and all of ``t_load`` shows;
- with loaders, the step the host's cores allow when every worker is fed by its loaders
  (``T_fed``, measured just before the run: the workers train at once on the folder with
  no exchange), a floor under the step: the ideal sharing above has no cost for moving
  batches between processes or switching between them.

Python use::

    from scalelab.experiment.compare import CompareOptions, compare
    from scalelab.workload import WorkloadSpec
    result = compare(WorkloadSpec("resnet18", input_shape=(3, 32, 32), num_classes=10),
                     CompareOptions(workers=2, rate="1gbit"))
    [(s.name, s.measured_samples_per_s, s.speedup) for s in result.steps]
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scalelab.errors import RunFailure, UsageError
from scalelab.experiment.ablation import (  # noqa: F401 - the public names, as before
    BASELINE,
    ORDER,
    RUN_ALGORITHMS,
    Change,
    StepConfig,
    ablation,
    baseline_config,
    load_baseline,
)
from scalelab.experiment.case import CaseInputs, predict_case, relative_error
from scalelab.experiment.loaders import input_note, step_input
from scalelab.experiment.measure import Measurements, case_inputs, fed_step_of, measured_parts
from scalelab.theory import amdahl
from scalelab.workload import WorkloadSpec


@dataclass(frozen=True)
class CompareOptions:
    workers: int
    rate: str | None = None
    baseline: StepConfig = field(default_factory=StepConfig)
    steps: int = 8
    warmup_steps: int = 2
    batch_sizes: tuple[int, ...] = (16, 32, 64, 128)
    one_at_a_time: bool = True
    timeout_s: float = 120.0
    seed: int = 0
    link_seconds: float = 1.0
    profile_steps: int = 4
    fresh_profiles: bool = True
    target_efficiency: float = 0.8
    data: str | None = None
    """An image folder (``PATH/<class>/<image>``) to train on; None: synthetic data."""
    layout: str | None = None
    """The model-state layout the plan is asked for (``plan --layout``); None: the plan's
    own choice. A sharded recommendation runs ``--architecture fsdp --zero N``."""
    algorithm: str = "default"
    """The computation configuration every timing and run trains in (``run --algorithm``)."""

    def __post_init__(self):
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) \
                or self.workers < 2:
            raise UsageError(f"--workers must be an integer >= 2 (a comparison of data-parallel "
                             f"configurations), got {self.workers!r}")
        if self.rate is not None:
            from scalelab.netem import parse_rate

            parse_rate(self.rate)
        if self.steps < 2:
            raise UsageError(f"--steps must be >= 2, got {self.steps}")
        if not 0 <= self.warmup_steps < self.steps:
            raise UsageError(f"warm-up steps must be in [0, steps), got {self.warmup_steps}")
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise UsageError(f"batch sizes must be >= 1, got {list(self.batch_sizes)}")
        from scalelab.runner.config import check_timeout_s

        check_timeout_s(self.timeout_s)
        if self.profile_steps < 1:
            raise UsageError(f"profile steps must be >= 1, got {self.profile_steps}")
        from scalelab.algorithm_names import parse

        if "fp16_autocast" in parse(self.algorithm):  # UsageError for an unknown name
            raise UsageError(f"--algorithm {self.algorithm}: fp16 trains through loss scaling, "
                             "which parameter servers and sharded runs do not (bf16_autocast)")
        if self.layout is not None and self.layout not in ("ddp", "zero1", "zero2", "zero3"):
            raise UsageError(f"--layout must be ddp, zero1, zero2 or zero3, got {self.layout!r}")
        if self.data is not None:
            from scalelab.imagefolder import check_folder

            check_folder(self.data)


# ----------------------------------------------------------------------------- the comparison


@dataclass(frozen=True)
class ComparedStep:
    """One configuration of the ablation, predicted and measured (rates in samples/s)."""

    name: str
    applied: dict[str, Any]
    """The recommendation(s) this step applied to the one before."""
    config: dict[str, Any]
    predicted_samples_per_s: float
    measured_samples_per_s: float
    error: float
    """(predicted - measured) / measured of samples/s."""
    predicted: dict[str, Any]
    """The predicted step's parts, seconds, its bottleneck and exchange form."""
    measured: dict[str, Any]
    """The run's median step, compute and exchange, seconds, and its achieved bandwidth."""
    inputs: CaseInputs
    speedup: float = 1.0
    """Measured samples/s over the baseline's."""
    predicted_speedup: float = 1.0
    """Predicted samples/s over the baseline's predicted."""

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["inputs"] = self.inputs.to_dict()
        return d


@dataclass(frozen=True)
class Comparison:
    """compare.json: the baseline, the recommendation, and every step between, measured."""

    model: str
    workload: dict[str, Any]
    workers: int
    rate: str | None
    rate_bps: float | None
    link: dict[str, Any]
    """The measured link: bandwidth_Bps, latency_s."""
    environment: dict[str, Any]
    baseline: dict[str, Any]
    recommended: dict[str, Any]
    recommendation: dict[str, Any]
    profile: dict[str, Any]
    contention: list[dict]
    plan_compute_s: float
    """The worker's measured compute at the recommended batch the plan started from, s."""
    options: dict[str, Any]
    steps: tuple[ComparedStep, ...]
    skipped: list[dict[str, str]]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["steps"] = [s.to_dict() for s in self.steps]
        return d


def _exchange_form(spec: WorkloadSpec, workers: int, cfg: StepConfig | None = None) -> str:
    from scalelab.runner import RunConfig

    if cfg is not None and cfg.sharded:
        return RunConfig(workload=spec, workers=workers, architecture="fsdp",
                         shard_level=cfg.zero).exchange_form
    return RunConfig(workload=spec, workers=workers, architecture="ps", mode="sync").exchange_form


def _recommend(profile: dict, workers: int, link: dict, compute_s: float, batch_size: int,
               exchange_form: str, target_efficiency: float, layout: str | None = None):
    """The plan's recommendation for ``workers`` on the measured ``link`` (bytes/s).

    The plan starts from the profile with the worker's compute ``compute_s`` measured at
    ``batch_size`` (as a run here sees it) as the device's step time there.
    """
    from scalelab.experiment.case import full_duplex_of
    from scalelab.plan import Cluster, PlanOptions, plan, profile_from_dict

    inp = profile_from_dict(profile)
    worker = dataclasses.replace(inp, batch_size=batch_size, step_s=compute_s,
                                 batches=((batch_size, compute_s),), fit_step_s=None)
    cluster = Cluster(nodes=workers, gpus_per_node=1, architecture="ps",
                      measured_network_Bps=link["bandwidth_Bps"], latency_s=link["latency_s"],
                      ps_partition="balanced", full_duplex=full_duplex_of(exchange_form))
    # a sharded layout is all-reduce's: the baseline's servers come from the ps rows
    sharded = layout not in (None, "ddp")
    opts = PlanOptions(target_efficiency=target_efficiency, max_gpus=workers,
                       architectures=("ps", "allreduce") if sharded else ("ps",),
                       layout=layout)
    return inp, plan(worker, cluster, opts)


def _servers_for(the_plan, workers: int) -> int:
    """The plan's parameter servers for ``workers`` devices (the comparison's fixed count),
    whatever device count it recommends."""
    rows = [r for r in the_plan.sweep if r.architecture == "ps" and r.gpus == workers]
    if not rows:
        raise RunFailure(f"the plan has no parameter-server row for {workers} workers")
    return max(1, int(rows[0].num_ps))


def _case(cfg: StepConfig, workers: int, rate: str | None) -> dict[str, Any]:
    if cfg.sharded:
        return {"workers": workers, "ps": None, "architecture": "fsdp", "zero": cfg.zero,
                "partition": None, "batch_size": cfg.batch_size, "rate": rate}
    return {"workers": workers, "ps": cfg.ps, "architecture": "ps",
            "partition": cfg.partition, "batch_size": cfg.batch_size, "rate": rate}


def _recommended(rec, servers: int, base: StepConfig) -> StepConfig:
    """The plan's recommendation as a configuration: sharded (fsdp at its ZeRO level, no
    servers: ``ps`` and ``partition`` left as the baseline's) when ``rec.layout`` says so."""
    common = {"batch_size": rec.batch_size, "algorithm": rec.algorithm or "default",
              "loader_workers": rec.loader_workers}
    if rec.layout != "ddp":
        return StepConfig(**common, ps=base.ps, partition=base.partition, architecture="fsdp",
                          zero=int(rec.layout[-1]))
    return StepConfig(**common, ps=servers, partition="balanced")


def _options(o: CompareOptions) -> dict[str, Any]:
    return {"steps": o.steps, "warmup_steps": o.warmup_steps, "data": o.data,
            "one_at_a_time": o.one_at_a_time, "batch_sizes": list(o.batch_sizes),
            "fresh_profiles": o.fresh_profiles, "target_efficiency": o.target_efficiency,
            "layout": o.layout, "algorithm": o.algorithm}


def _run_step(spec, ch: Change, o: CompareOptions, meas: Measurements, info,
              io: dict | None, say, label: str) -> ComparedStep:
    """Predict one configuration, train it for real, and measure it."""
    from scalelab.runner import RunConfig, run_training

    cfg, w = ch.config, o.workers
    form = _exchange_form(spec, w, cfg)
    meas.begin_case()  # fresh_profiles: compute and contention timed just before the run
    inputs = case_inputs(_case(cfg, w, o.rate), form, meas, info)
    pred = predict_case(inputs)
    fed = None
    if io and cfg.loader_workers > 0:
        fed = fed_step_of(meas.fed_timings(o.data, cfg.batch_size, w, cfg.loader_workers),
                          inputs.architecture)
    pipeline = step_input(cfg, io, inputs, w, pred.step_s, fed)
    if pipeline:
        pred = predict_case(inputs, io_s=pipeline["io_s"])
    predicted = amdahl.weak_throughput(w, cfg.batch_size, pred.step_s)
    where = (f"ZeRO-{cfg.zero} (fsdp)" if cfg.sharded
             else f"ps {cfg.ps}, partition {cfg.partition}")
    say(f"{label} {ch.name}: batch {cfg.batch_size}, {where}"
        + (f", loaders {cfg.loader_workers}" if pipeline else "")
        + f"; predicted {predicted:,.1f} samples/s; training")
    run = run_training(RunConfig(
        workload=spec, workers=w, ps=None if cfg.sharded else cfg.ps,
        architecture=cfg.architecture, shard_level=cfg.zero or 3, mode="sync",
        batch_size=cfg.batch_size, steps=o.steps, warmup_steps=o.warmup_steps,
        partition=cfg.partition, emulate_network=o.rate, timeout_s=o.timeout_s, seed=o.seed,
        data=o.data, loader_workers=cfg.loader_workers,
        device="cpu", algorithm=o.algorithm))  # predicted from CPU compute timed here
    got = measured_parts(run)
    data_s = run["steps"].get("data_s")
    got["data_s"] = data_s["median"] if isinstance(data_s, dict) else None
    measured = got["samples_per_s"]
    if not measured or not got["step_s"]:
        raise RunFailure(f"step {ch.name}: the run reported no step time")
    say(f"  measured {measured:,.1f} samples/s")
    return ComparedStep(
        name=ch.name, applied=ch.applied,
        config={**cfg.to_dict(), "workers": w, "rate": o.rate},
        predicted_samples_per_s=predicted, measured_samples_per_s=measured,
        error=relative_error(predicted, measured),
        predicted={"step_s": pred.step_s, "compute_s": pred.compute_s, "comm_s": pred.comm_s,
                   "push_s": pred.push_s, "pull_s": pred.pull_s,
                   "io_s": pred.io_s, "bottleneck": pred.bottleneck, "form": pred.form,
                   "effective_servers": pred.effective_servers,
                   "input": pipeline},
        measured={**got, "achieved_bandwidth_Bps": run.get("achieved_bandwidth_Bps")},
        inputs=inputs)


def _with_speedups(steps: list[ComparedStep]) -> tuple[ComparedStep, ...]:
    b_meas = steps[0].measured_samples_per_s
    b_pred = steps[0].predicted_samples_per_s
    return tuple(dataclasses.replace(s, speedup=s.measured_samples_per_s / b_meas,
                                     predicted_speedup=s.predicted_samples_per_s / b_pred)
                 for s in steps)


def _measured_profile(spec, o: CompareOptions, say) -> dict:
    from scalelab.profiler import ProfileOptions, run_profile

    sizes = sorted(set(o.batch_sizes) | {o.baseline.batch_size})
    say(f"profiling one device at batch sizes {', '.join(map(str, sizes))}")
    profile = run_profile(spec, ProfileOptions(batch_sizes=sizes, algorithms="none",
                                               steps=o.profile_steps, seed=o.seed,
                                               data=o.data or "synthetic"))
    if not isinstance(profile, dict):
        profile = profile.to_dict()
    if o.baseline.batch_size not in {r["batch_size"] for r in profile["batches"]}:
        raise UsageError(f"baseline batch {o.baseline.batch_size} does not fit the device memory")
    return profile


def compare(spec: WorkloadSpec, options: CompareOptions,
            progress: Callable[[str], None] | None = None) -> Comparison:
    """Profile, plan, then predict and run every ablation step (compare.json: ``to_dict()``)."""
    from scalelab import netem
    from scalelab.opcount import describe

    say = progress or (lambda text: None)
    o, w, base = options, options.workers, options.baseline
    if o.rate is not None:
        netem.check_available()
    meas = Measurements(spec, o.profile_steps, o.link_seconds, o.seed, o.fresh_profiles, say,
                        algorithm=o.algorithm)
    link = meas.link(o.rate)
    if not link["bandwidth_Bps"] > 0:
        raise RunFailure(f"the link probe measured no bandwidth ({link})")
    profile = _measured_profile(spec, o, say)
    rec_batch = profile["recommended_batch_size"]
    info = describe(spec, flops=False)
    form = _exchange_form(spec, w)
    # The worker's compute at the recommended batch, as a run here sees it (contention).
    at_rec = case_inputs(_case(dataclasses.replace(base, batch_size=rec_batch), w, o.rate),
                         form, meas, info)
    inp, the_plan = _recommend(profile, w, link, at_rec.worker_compute_s, rec_batch, form,
                               o.target_efficiency, o.layout)
    rec = the_plan.recommendation
    recommended = _recommended(rec, _servers_for(the_plan, w), base)
    changes, skipped = ablation(base, recommended, o.one_at_a_time)
    io = profile.get("io") if o.data else None
    notes = [f"every timing and run trains in --algorithm {o.algorithm}; the profile compares "
             "no other configuration", input_note(
                 recommended, io, w)]
    steps = []
    for i, ch in enumerate(changes):
        steps.append(_run_step(spec, ch, o, meas, info, io, say,
                               f"step {i + 1}/{len(changes)}"))
    env = dict(profile.get("environment") or {})
    env["load_average"] = list(os.getloadavg())
    tb = inp.tensor_bytes
    return Comparison(
        model=spec.model, workload=spec.to_dict(), workers=w, rate=o.rate,
        rate_bps=link.get("rate_bps"), link=link, environment=env, baseline=base.to_dict(),
        recommended=recommended.to_dict(), recommendation=rec.to_dict(),
        profile={"batches": [{"batch_size": r["batch_size"], "step_s": r["step_s"]}
                             for r in profile["batches"]],
                 "recommended_batch_size": rec_batch, "param_bytes": inp.param_bytes,
                 "largest_tensor_fraction": max(tb) / sum(tb) if tb else None,
                 "io": profile.get("io")},
        contention=[{"step": s.name, "batch_size": s.config["batch_size"], "workers": w,
                     "factor": s.inputs.contention} for s in steps],
        plan_compute_s=at_rec.worker_compute_s, options=_options(o),
        steps=_with_speedups(steps), skipped=skipped, notes=notes)


__all__ = ["BASELINE", "ORDER", "Change", "ComparedStep", "Comparison", "CompareOptions",
           "StepConfig", "ablation", "baseline_config", "compare", "load_baseline"]
