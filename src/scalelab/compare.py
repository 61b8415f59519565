"""Naive against recommended, measured: the paper's guidelines applied one at a time.

The baseline is what a practitioner starts from unadvised: per-worker batch 16, one
parameter server, whole-tensor placement, the default computation configuration and no
loader processes (:data:`BASELINE`; a TOML file overrides any key). The recommended
configuration is what :func:`scalelab.planner.plan` recommends for the same workers on the
measured link. From the baseline the recommendations are applied in the paper's order
(:data:`ORDER`: minibatch and computation algorithm; loader processes; number of parameter
servers; balanced shards); every configuration is predicted with
:func:`scalelab.planner.predict_step` and trained for real with
:func:`scalelab.runner.run_training` (on an emulated network when a rate is given).

Measured here, by the pieces :mod:`scalelab.validate` uses for its grids: the link
(:func:`scalelab.netem.measure_link`, or loopback), a worker's compute with the runner's
thread split and its contention factor (W workers timing steps at once on this host), and
the one-device profile (:func:`scalelab.profiler.run_profile`) whose recommended batch the
planner starts from. Each step is predicted by :func:`scalelab.validate.predict` (the
planner's :func:`~scalelab.planner.predict_step`) and its error is
``(predicted - measured) / measured`` of samples/s.

Python use::

    from scalelab.compare import CompareOptions, compare
    from scalelab.workload import WorkloadSpec
    result = compare(WorkloadSpec("resnet18", input_shape=(3, 32, 32), num_classes=10),
                     CompareOptions(workers=2, rate="1gbit"))
    [(s["name"], s["measured_samples_per_s"], s["speedup"]) for s in result["steps"]]
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalelab.errors import RunFailure, UsageError
from scalelab.results import read_toml
from scalelab.workload import WorkloadSpec

BASELINE: dict[str, Any] = {
    "batch_size": 16,
    "ps": 1,
    "partition": "tensor",
    "algorithm": "default",
    "loader_workers": 0,
}
ORDER = ("batch+algorithm", "loaders", "servers", "balanced shards")
RUN_ALGORITHMS = ("default",)  # the computation configurations scalelab run trains with


@dataclass(frozen=True)
class StepConfig:
    """One configuration of the ablation (the keys a baseline file may set)."""

    batch_size: int = 16
    ps: int = 1
    partition: str = "tensor"
    algorithm: str = "default"
    loader_workers: int = 0

    def __post_init__(self):
        for name, low in (("batch_size", 1), ("ps", 1), ("loader_workers", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise UsageError(f"{name} must be an integer >= {low}, got {v!r}")
        if self.partition not in ("balanced", "tensor"):
            raise UsageError(f"partition must be 'balanced' or 'tensor', got {self.partition!r}")
        if self.algorithm not in RUN_ALGORITHMS:
            raise UsageError(f"algorithm {self.algorithm!r}: scalelab run trains only in the "
                             f"default computation configuration ({', '.join(RUN_ALGORITHMS)})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def baseline_config(overrides: dict[str, Any] | None = None, where: str = "baseline"
                    ) -> StepConfig:
    """:data:`BASELINE` with ``overrides``; unknown keys are a usage error."""
    overrides = overrides or {}
    unknown = sorted(set(overrides) - set(BASELINE))
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(BASELINE))})")
    try:
        return StepConfig(**{**BASELINE, **overrides})
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None


def load_baseline(path: str | Path) -> StepConfig:
    """A baseline TOML file (any keys of :data:`BASELINE`) as a :class:`StepConfig`."""
    return baseline_config(read_toml(path), str(path))


@dataclass(frozen=True)
class Change:
    name: str
    config: StepConfig
    applied: dict[str, Any]


def ablation(baseline: StepConfig, recommended: StepConfig, one_at_a_time: bool = True
             ) -> tuple[list[Change], list[dict[str, str]]]:
    """Configurations from ``baseline`` to ``recommended`` in the paper's order.

    Returns the steps (the first ``baseline``, the last ``recommended``) and the
    recommendations skipped because the configuration already had them. Without
    ``one_at_a_time``: just the two ends.
    """
    groups = {
        "batch+algorithm": ("batch_size", "algorithm"),
        "loaders": ("loader_workers",),
        "servers": ("ps",),
        "balanced shards": ("partition",),
    }
    steps = [Change("baseline", baseline, {})]
    skipped: list[dict[str, str]] = []
    current = baseline
    if one_at_a_time:
        for name in ORDER:
            change = {k: getattr(recommended, k) for k in groups[name]
                      if getattr(recommended, k) != getattr(current, k)}
            if not change:
                skipped.append({"name": name, "reason": "the configuration already has it: "
                                + ", ".join(f"{k} {getattr(current, k)}" for k in groups[name])})
                continue
            current = dataclasses.replace(current, **change)
            steps.append(Change(name, current, change))
    else:
        change = {k: v for k, v in recommended.to_dict().items() if baseline.to_dict()[k] != v}
        steps.append(Change("recommended", recommended, change))
    if len(steps) == 1:
        steps.append(Change("recommended", recommended, {}))
    last = steps[-1]
    if last.name != "recommended":
        steps[-1] = Change("recommended", last.config, {**last.applied, "step": last.name})
    assert steps[-1].config == recommended
    return steps, skipped


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
        if not self.timeout_s > 0:
            raise UsageError(f"--timeout must be > 0 seconds, got {self.timeout_s}")
        if self.profile_steps < 1:
            raise UsageError(f"profile steps must be >= 1, got {self.profile_steps}")


# ----------------------------------------------------------------------------- the comparison


def _recommend(profile: dict, workers: int, link: dict, compute_s: float,
               target_efficiency: float):
    """The planner's recommendation for ``workers`` on ``link``, at worker compute ``compute_s``."""
    from scalelab.planner import Cluster, ModelParams, PlanOptions, load_profile, plan
    from scalelab.results import write_json

    with tempfile.TemporaryDirectory(prefix="scalelab-compare-") as d:
        inp = load_profile(write_json(Path(d) / "profile.json", "profile", profile))
    cluster = Cluster(nodes=workers, gpus_per_node=1, architecture="ps",
                      network_gbps=link["bandwidth_Bps"] * 8 / 1e9,
                      latency_s=link["latency_s"], ps_partition="balanced")
    scale = compute_s / inp.step_s
    opts = PlanOptions(target_efficiency=target_efficiency, max_gpus=workers,
                       architectures=("ps",), params=ModelParams(compute_scale=scale))
    return inp, plan(inp, cluster, opts), scale


def _case(cfg: StepConfig, workers: int, rate: str | None) -> dict[str, Any]:
    return {"workers": workers, "ps": cfg.ps, "architecture": "ps",
            "partition": cfg.partition, "batch_size": cfg.batch_size, "rate": rate}


def compare(spec: WorkloadSpec, options: CompareOptions,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Profile, plan, then predict and run every ablation step; the compare.json content."""
    from scalelab import netem
    from scalelab.profiler import ProfileOptions, run_profile
    from scalelab.runner import RunConfig, run_training
    from scalelab.validate import (
        Measurements,
        ValidationOptions,
        measured_parts,
        predict,
        prediction_inputs,
        relative_error,
    )
    from scalelab.workload import describe

    say = progress or (lambda text: None)
    o = options
    w = o.workers
    base = o.baseline
    if o.rate is not None:
        netem.check_available()
    vopts = ValidationOptions(steps=o.steps, warmup_steps=o.warmup_steps,
                              probe_seconds=o.link_seconds, timeout_s=o.timeout_s, seed=o.seed,
                              fresh_profiles=o.fresh_profiles)
    meas = Measurements(spec, vopts, say)
    link = meas.link(o.rate)
    if not link["bandwidth_Bps"] > 0:
        raise RunFailure(f"the link probe measured no bandwidth ({link})")

    sizes = sorted(set(o.batch_sizes) | {base.batch_size})
    say(f"profiling one device at batch sizes {', '.join(map(str, sizes))}")
    profile = run_profile(spec, ProfileOptions(batch_sizes=sizes, algorithms="none",
                                               steps=o.profile_steps, seed=o.seed))
    fitting = {r["batch_size"] for r in profile["batches"]}
    if base.batch_size not in fitting:
        raise UsageError(f"baseline batch {base.batch_size} does not fit the device memory")
    rec_batch = profile["recommended_batch_size"]
    info = describe(spec, flops=False)
    # The worker's compute at the recommended batch, as a run here sees it (contention).
    at_rec = prediction_inputs(_case(dataclasses.replace(base, batch_size=rec_batch), w,
                                     o.rate), meas, info)
    inp, the_plan, scale = _recommend(profile, w, link, at_rec["compute_s"] *
                                      at_rec["contention"], o.target_efficiency)
    rec = the_plan.recommendation
    recommended = StepConfig(batch_size=rec.batch_size, ps=max(1, rec.num_ps),
                             partition="balanced", algorithm=rec.algorithm or "default",
                             loader_workers=rec.loader_workers)
    changes, skipped = ablation(base, recommended, o.one_at_a_time)
    notes = [f"algorithm {recommended.algorithm}: scalelab run trains in the default "
             "computation configuration, so the profile compares no others",
             f"loader_workers {recommended.loader_workers}: synthetic data, no input time "
             "to mask"]

    steps: list[dict[str, Any]] = []
    for i, ch in enumerate(changes):
        cfg = ch.config
        case = _case(cfg, w, o.rate)
        meas.begin_case()  # fresh_profiles: compute and contention timed just before the run
        inputs = prediction_inputs(case, meas, info)
        pred = predict(inputs)
        predicted = w * cfg.batch_size / pred.step_s
        say(f"step {i + 1}/{len(changes)} {ch.name}: batch {cfg.batch_size}, ps {cfg.ps}, "
            f"partition {cfg.partition}; predicted {predicted:,.1f} samples/s; training")
        run = run_training(RunConfig(
            workload=spec, workers=w, ps=cfg.ps, architecture="ps", mode="sync",
            batch_size=cfg.batch_size, steps=vopts.steps, warmup_steps=vopts.warmup_steps,
            partition=cfg.partition, emulate_network=o.rate, timeout_s=o.timeout_s,
            seed=o.seed))
        got = measured_parts(run)
        measured = got["samples_per_s"]
        if not measured or not got["step_s"]:
            raise RunFailure(f"step {ch.name}: the run reported no step time")
        steps.append({
            "name": ch.name,
            "applied": ch.applied,
            "config": {**cfg.to_dict(), "workers": w, "architecture": "ps", "rate": o.rate},
            "predicted_samples_per_s": predicted,
            "measured_samples_per_s": measured,
            "error": relative_error(predicted, measured),
            "predicted": {"step_s": pred.step_s, "compute_s": pred.compute_s,
                          "comm_s": pred.comm_s, "push_s": pred.push_s, "pull_s": pred.pull_s,
                          "bottleneck": pred.bottleneck, "form": pred.form,
                          "effective_servers": pred.effective_servers},
            "measured": {**got, "achieved_bandwidth_Bps": run.get("achieved_bandwidth_Bps")},
            "inputs": inputs,
        })
        say(f"  measured {measured:,.1f} samples/s")
    b_meas = steps[0]["measured_samples_per_s"]
    b_pred = steps[0]["predicted_samples_per_s"]
    for s in steps:
        s["speedup"] = s["measured_samples_per_s"] / b_meas
        s["predicted_speedup"] = s["predicted_samples_per_s"] / b_pred

    env = dict(profile.get("environment") or {})
    env["load_average"] = list(os.getloadavg())
    tb = inp.tensor_bytes
    return {
        "model": spec.model,
        "workload": spec.to_dict(),
        "workers": w,
        "rate": o.rate,
        "rate_bps": link.get("rate_bps"),
        "link": link,
        "environment": env,
        "baseline": base.to_dict(),
        "recommended": recommended.to_dict(),
        "recommendation": rec.to_dict(),
        "profile": {"batches": [{"batch_size": r["batch_size"], "step_s": r["step_s"]}
                                for r in profile["batches"]],
                    "recommended_batch_size": rec_batch, "param_bytes": inp.param_bytes,
                    "largest_tensor_fraction": max(tb) / sum(tb) if tb else None},
        "contention": [{"step": s["name"], "batch_size": s["config"]["batch_size"],
                        "workers": w, "factor": s["inputs"]["contention"]} for s in steps],
        "plan_compute_scale": scale,
        "options": {"steps": vopts.steps, "warmup_steps": vopts.warmup_steps,
                    "one_at_a_time": o.one_at_a_time, "batch_sizes": list(o.batch_sizes),
                    "fresh_profiles": o.fresh_profiles,
                    "target_efficiency": o.target_efficiency},
        "steps": steps,
        "skipped": skipped,
        "notes": notes,
    }


__all__ = ["BASELINE", "ORDER", "Change", "CompareOptions", "StepConfig", "ablation",
           "baseline_config", "compare", "load_baseline"]
