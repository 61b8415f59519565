"""``run_profile``: the whole single-device benchmark the paper's procedure starts from.

1. Step breakdown per batch size (forward, backward, optimizer, step; medians, spreads).
2. Minibatch search (``batch_sizes="auto"``): timed trials double the batch from 1 while
   throughput still grows (a plateau is two doublings without 5% more samples/s); then
   single-step memory probes keep doubling up to the cap, and bisection finds the largest
   batch that fits the budget. Trials are reused: every timed trial is a row of the table.
3. Computation algorithms at the recommended batch: the candidates that matter on the
   device, those that fit the budget, the fastest chosen.
4. The input pipeline, when ``data`` is an image folder.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from scalelab.environment import collect_environment
from scalelab.errors import UsageError
from scalelab.profiler import algorithms as algos
from scalelab.profiler.input_pipeline import check_folder, profile_input
from scalelab.profiler.memory import device_memory_bytes
from scalelab.profiler.probe import Trial, TrialRunner
from scalelab.profiler.search import find_max_batch, linear_fit, recommend_batch
from scalelab.workload import WorkloadSpec, describe

SAFETY_MARGIN = 0.10  # of the device's memory, kept free by the default budget
PLATEAU_GAIN = 0.05
BUSY_LOADAVG = 1.0  # 1-minute load average above which a profile is marked as contended


@dataclass
class ProfileOptions:
    """What to measure. ``batch_sizes`` is "auto" or a list of positive integers."""

    device: str = "cpu"
    batch_sizes: str | list[int] = "auto"
    memory_budget_bytes: int | None = None
    data: str = "synthetic"
    algorithms: str = "auto"
    warmup: int = 1
    steps: int = 2
    max_batch: int | None = None
    max_trials: int = 12
    seed: int = 0

    def __post_init__(self):
        if self.device not in ("cpu", "cuda"):
            raise UsageError(f"--device must be cpu or cuda, got {self.device!r}")
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise UsageError("--device cuda: CUDA is not available on this machine "
                                 "(torch.cuda.is_available() is False)")
        if isinstance(self.batch_sizes, str):
            if self.batch_sizes != "auto":
                self.batch_sizes = parse_batch_sizes(self.batch_sizes)
        else:
            self.batch_sizes = parse_batch_sizes(",".join(map(str, self.batch_sizes)))
        if self.algorithms not in ("auto", "none"):
            raise UsageError(f"--algorithms must be auto or none, got {self.algorithms!r}")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes <= 0:
            raise UsageError(f"--memory-budget must be > 0, got {self.memory_budget_bytes}")
        if self.warmup < 0 or self.steps < 1:
            raise UsageError(f"need warmup >= 0 and steps >= 1, got {self.warmup}, {self.steps}")
        if self.max_batch is None:
            self.max_batch = 256 if self.device == "cpu" else 4096
        if self.data != "synthetic":
            check_folder(self.data)


def parse_batch_sizes(text: str) -> list[int]:
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--batch-sizes {text!r}: expected auto or integers like 8,16,32") \
            from None
    if not values or any(v <= 0 for v in values):
        raise UsageError(f"--batch-sizes {text!r}: every batch size must be > 0")
    return sorted(set(values))


def default_budget(device: str) -> int:
    """The device's memory (on CPU what is available now) less the safety margin."""
    return int(device_memory_bytes(device) * (1 - SAFETY_MARGIN))


def _row(t: Trial) -> dict[str, Any]:
    d = t.timing.to_dict()
    d.pop("algorithm", None)
    return d


class _Progress:
    def __init__(self, progress):
        self.progress = progress

    def __call__(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)


def run_profile(spec: WorkloadSpec, options: ProfileOptions | None = None,
                progress=None) -> dict[str, Any]:
    """Measure ``spec`` on ``options.device``; returns the profile.json content."""
    opts = options or ProfileOptions()
    say = _Progress(progress)
    load_before = os.getloadavg()[0]
    say("describing the model")
    info = describe(spec)
    budget = opts.memory_budget_bytes or default_budget(opts.device)
    timed: dict[int, Trial] = {}
    memory_only: dict[int, Trial] = {}
    with TrialRunner(spec, opts.device, budget, opts.seed) as runner:

        def timed_trial(b: int) -> Trial:
            say(f"timing batch {b}")
            t = runner.run(b, "default", opts.warmup, opts.steps)
            if t.fits:
                timed[b] = t
            return t

        if opts.batch_sizes == "auto":
            search = _auto_search(runner, opts, timed, memory_only, timed_trial, say)
            max_batch = search.max_fit
        else:
            for b in opts.batch_sizes:
                t = runner.run(b, "default", opts.warmup + 1, max(opts.steps, 3))
                say(f"timed batch {b}")
                if t.fits:
                    timed[b] = t
                else:
                    memory_only[b] = t
            fitting = [b for b in opts.batch_sizes if b in timed]
            max_batch = max(fitting) if fitting else None
        if not timed:
            first = min(memory_only) if memory_only else 1
            raise UsageError(
                f"the memory budget ({budget / 2**20:.0f} MiB) is too small for batch {first} "
                f"of {spec.model} ({memory_only[first].reason if memory_only else 'no fit'})"
            )
        recommended = recommend_batch({b: t.timing.samples_per_s for b, t in timed.items()})
        algo = _algorithms(runner, opts, spec, recommended, timed[recommended], budget, say)
        steps_run = list(runner.steps_run)

    batches = [_row(timed[b]) for b in sorted(timed)]
    sizes = [r["batch_size"] for r in batches]
    mem_points = {r["batch_size"]: r["peak_memory_bytes"] for r in batches}
    mem_points.update({b: t.peak_memory_bytes for b, t in memory_only.items()
                       if t.fits and t.peak_memory_bytes})
    chosen_step = timed[recommended].timing.step_s
    if opts.data != "synthetic":
        say("timing the input pipeline")
        io = profile_input(opts.data, spec.input_shape, recommended, chosen_step)
    else:
        io = {"source": "synthetic", "load_s_per_batch": 0.0, "loader_workers_needed": 0}
    env = collect_environment(opts.device)
    env["loadavg_before"] = load_before
    env["loadavg_after"] = os.getloadavg()[0]
    warnings = []
    if load_before > BUSY_LOADAVG:
        warnings.append(
            f"the machine was busy when profiling began (load average {load_before:.1f} on "
            f"{os.cpu_count()} cores): other processes compete for the cores, so step times "
            "are slower and noisier than on an idle machine")
    return {
        "warnings": warnings,
        "environment": env,
        "workload": {
            **spec.to_dict(),
            "param_count": info.param_count,
            "param_bytes": info.param_bytes,
            "tensor_bytes": info.tensor_bytes,
            "tensor_names": info.tensor_names,
            "flops_per_sample": info.flops_per_sample,
        },
        "device": opts.device,
        "batches": batches,
        "fit": {
            "step_s": linear_fit(sizes, [r["step_s"] for r in batches]),
            "memory_bytes": linear_fit(sorted(mem_points),
                                       [mem_points[b] for b in sorted(mem_points)]),
        },
        "memory_budget_bytes": budget,
        "max_batch_size": max_batch,
        "max_batch_capped": bool(max_batch and max_batch >= opts.max_batch),
        "recommended_batch_size": recommended,
        "recommended_step_s": chosen_step,
        "achieved_flops_per_s": info.flops_per_sample * timed[recommended].timing.samples_per_s,
        "memory_probes": [{"batch_size": b, "fits": t.fits, "peak_memory_bytes":
                           t.peak_memory_bytes, "reason": t.reason}
                          for b, t in sorted(memory_only.items())],
        "algorithms": algo,
        "io": io,
        "cost": {
            "steps_run": sum(n for _, _, n in steps_run),
            "samples_run": sum(b * n for b, _, n in steps_run),
            "trials": len(steps_run),
        },
    }


def _auto_search(runner, opts, timed, memory_only, timed_trial, say):
    """Timed doubling while throughput grows, memory-only probes after; then bisection."""
    state = {"best": 0.0, "flat": 0}

    def fits(b: int) -> bool:
        if state["flat"] < 2:
            t = timed_trial(b)
            if t.fits:
                sps = t.timing.samples_per_s
                state["flat"] = 0 if sps > state["best"] * (1 + PLATEAU_GAIN) else \
                    state["flat"] + 1
                state["best"] = max(state["best"], sps)
            else:
                memory_only[b] = t
            return t.fits
        say(f"memory probe at batch {b}")
        t = runner.run(b, "default", 0, 1)
        memory_only[b] = t
        return t.fits

    return find_max_batch(fits, start=1, cap=opts.max_batch, max_trials=opts.max_trials)


def _algorithms(runner, opts, spec, batch, base: Trial, budget, say) -> dict[str, Any]:
    if opts.algorithms == "none":
        return {"chosen": "default", "batch_size": batch, "candidates": [
            {"name": "default", "step_s": base.timing.step_s,
             "peak_memory_bytes": base.peak_memory_bytes, "fits": True}]}
    results = []
    for name in algos.candidates(opts.device, len(spec.input_shape)):
        if name == "default":
            t = base
        else:
            say(f"trying {name} at batch {batch}")
            try:
                t = runner.run(batch, name, opts.warmup, opts.steps)
            except RuntimeError as e:  # a configuration this build cannot run
                results.append({"name": name, "step_s": None, "peak_memory_bytes": None,
                                "fits": False, "error": str(e)[:200]})
                continue
        results.append({
            "name": name,
            "step_s": t.timing.step_s if t.timing else None,
            "peak_memory_bytes": t.peak_memory_bytes,
            "fits": t.fits,
            "samples_per_s": t.timing.samples_per_s if t.timing else None,
        })
    usable = [r for r in results if r["fits"] and r["step_s"]]
    chosen = min(usable, key=lambda r: r["step_s"])["name"] if usable else "default"
    return {"chosen": chosen, "batch_size": batch, "candidates": results}


def cost_in_steps(profile: dict[str, Any]) -> float:
    """Samples processed by the profile over the chosen batch: its cost in chosen steps.

    Step time grows about linearly with the batch above the smallest batches, so samples
    run divided by the chosen batch counts the profile's time in units of the chosen step.
    """
    b = profile["recommended_batch_size"]
    return profile["cost"]["samples_run"] / b if b else math.inf
