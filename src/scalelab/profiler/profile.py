"""``run_profile``: the whole single-device benchmark the paper's procedure starts from.

1. Step breakdown per batch size (forward, backward, optimizer, step; medians, spreads).
2. Minibatch search (``batch_sizes="auto"``): timed trials double the batch from 1 while
   throughput still grows (a plateau is two doublings without 5% more samples/s); then
   single-step memory probes jump to the batch the memory line says fits the budget and
   bisect (:func:`scalelab.profiler.search.find_max_batch`, with trials held back for
   it). Trials are reused: every timed trial is a row of the table. A batch at which the
   model does not train (BatchNorm at batch 1) is recorded and passed over.
3. Computation algorithms at the recommended batch: the candidates that matter on the
   device, those that fit the budget, the fastest chosen.
4. The input pipeline, when ``data`` is an image folder.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from scalelab.environment import collect_environment
from scalelab.errors import UsageError
from scalelab.opcount import describe
from scalelab.profiler import algorithms as algos
from scalelab.profiler.device import parse_device, resolve_device
from scalelab.profiler.host import measure_host_s_per_op
from scalelab.profiler.input_pipeline import check_folder, profile_input
from scalelab.profiler.memory import (
    device_memory_bytes,
    too_large_note,
    try_memory_components,
)
from scalelab.profiler.probe import Trial, TrialRunner
from scalelab.profiler.search import Probe, find_max_batch, linear_fit, recommend_batch
from scalelab.theory import memory
from scalelab.workload import WorkloadSpec

PLATEAU_GAIN = 0.05
BUSY_LOADAVG = 1.0  # 1-minute load average above which a profile is marked as contended
DEFAULT_STEPS = 5  # timed steps per trial unless asked otherwise
MIN_CUDA_STEPS = 3  # on CUDA never fewer: a median of one or two event timings is noise


@dataclass
class ProfileOptions:
    """What to measure. ``batch_sizes`` is "auto" or a list of positive integers;
    ``device`` is ``cpu``, ``cuda`` (the process's GPU: ``LOCAL_RANK`` or the current one)
    or ``cuda:N``. ``torch_device`` is the device resolved, its index explicit."""

    device: str = "cpu"
    batch_sizes: str | list[int] = "auto"
    memory_budget_bytes: int | None = None
    data: str = "synthetic"
    algorithms: str = "auto"
    warmup: int = 1
    steps: int = DEFAULT_STEPS
    max_batch: int | None = None
    max_trials: int = 16
    seed: int = 0
    torch_device: torch.device = field(init=False, repr=False)

    def __post_init__(self):
        self.device = str(self.device)
        parse_device(self.device)
        self.torch_device = resolve_device(self.device)
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
        if self.max_trials < 4:
            raise UsageError(f"max_trials must be >= 4, got {self.max_trials}")
        if self.max_batch is None:
            self.max_batch = 256 if self.device_type == "cpu" else 4096
        if self.max_batch < 1:
            raise UsageError(f"--max-batch must be >= 1, got {self.max_batch}")
        if self.data != "synthetic":
            check_folder(self.data)

    @property
    def device_type(self) -> str:
        return self.torch_device.type

    @property
    def timed_steps(self) -> int:
        """Steps timed per trial: as asked, but at least 3 on CUDA."""
        return max(self.steps, MIN_CUDA_STEPS) if self.device_type == "cuda" else self.steps


def parse_batch_sizes(text: str) -> list[int]:
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--batch-sizes {text!r}: expected auto or integers like 8,16,32") \
            from None
    if not values or any(v <= 0 for v in values):
        raise UsageError(f"--batch-sizes {text!r}: every batch size must be > 0")
    return sorted(set(values))


def default_budget(device: str | torch.device) -> int:
    """The device's memory (on CPU what is available now) less the safety margin."""
    return int(memory.usable_bytes(device_memory_bytes(device)))


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
    dev = opts.torch_device
    budget = opts.memory_budget_bytes or default_budget(dev)
    m = _Measured()
    with TrialRunner(spec, dev, budget, opts.seed) as runner:
        if opts.batch_sizes == "auto":
            max_batch = _auto_search(runner, opts, m, say).max_fit
        else:
            max_batch = _listed(runner, opts, m, say)
        if not m.timed:
            raise UsageError(_nothing_measured(spec, m, budget))
        recommended = recommend_batch({b: t.timing.samples_per_s for b, t in m.timed.items()})
        algo = _algorithms(runner, opts, spec, recommended, m.timed[recommended], budget, say)
        steps_run = list(runner.steps_run)
    chosen_step = m.timed[recommended].timing.step_s
    if opts.data != "synthetic":
        say("timing the input pipeline")
        io = profile_input(opts.data, spec.input_shape, recommended, chosen_step)
    else:
        io = {"source": "synthetic", "load_s_per_batch": 0.0, "loader_workers_needed": 0}
    say("timing the host's cost per operation")
    host = measure_host_s_per_op()
    env = _environment(dev, load_before)
    warnings = _warnings(opts, env)
    return {
        "warnings": warnings,
        "machine_busy": env["busy"],
        "timed_steps": opts.timed_steps,
        "environment": env,
        "workload": {
            **spec.to_dict(),
            "param_count": info.param_count,
            "param_bytes": info.param_bytes,
            "tensor_bytes": info.tensor_bytes,
            "tensor_names": info.tensor_names,
            "flops_per_sample": info.flops_per_sample,
            **_token_fields(spec, info),
        },
        "device": dev.type,
        "device_index": dev.index,
        **_batches_and_fit(m, spec.tokens_per_sample),
        "memory_budget_bytes": budget,
        "max_batch_size": max_batch,
        "max_batch_is_memory_limit": _is_memory_limit(opts, m, max_batch),
        "memory_components": try_memory_components(spec),
        "max_batch_capped": bool(max_batch and max_batch >= opts.max_batch),
        "recommended_batch_size": recommended,
        "recommended_step_s": chosen_step,
        "achieved_flops_per_s": info.flops_per_sample * m.timed[recommended].timing.samples_per_s,
        "memory_probes": [{"batch_size": b, "fits": t.fits, "peak_memory_bytes":
                           t.peak_memory_bytes, "reason": t.reason}
                          for b, t in sorted(m.memory_only.items())],
        "untrainable_batches": [{"batch_size": b, "reason": t.reason}
                                for b, t in sorted(m.untrainable.items())],
        "algorithms": algo,
        "io": io,
        "host": host.to_dict(),
        "cost": {
            "steps_run": sum(n for _, _, n in steps_run),
            "samples_run": sum(b * n for b, _, n in steps_run),
            "trials": len(steps_run),
        },
    }


class _Measured:
    """The trials of one profile: timed rows, memory-only probes, batches that do not train."""

    def __init__(self):
        self.timed: dict[int, Trial] = {}
        self.memory_only: dict[int, Trial] = {}
        self.untrainable: dict[int, Trial] = {}

    def add(self, t: Trial, timed: bool) -> Trial:
        if not t.trains:
            self.untrainable[t.batch_size] = t
        elif timed and t.fits and t.timing is not None:
            self.timed[t.batch_size] = t
        else:
            self.memory_only[t.batch_size] = t
        return t


def _is_memory_limit(opts, m: _Measured, max_batch: int | None) -> bool:
    """Whether ``max_batch`` is where memory ran out (a larger batch was tried and did not
    fit), not merely the largest batch asked for."""
    failed = [b for b, t in m.memory_only.items() if not t.fits]
    return bool(max_batch) and any(b > max_batch for b in failed)


def _listed(runner, opts, m: _Measured, say) -> int | None:
    """The batch sizes the user listed, each timed; those that do not train are skipped."""
    for b in opts.batch_sizes:
        say(f"timing batch {b}")
        m.add(runner.run(b, "default", opts.warmup, opts.timed_steps), timed=True)
    fitting = [b for b in opts.batch_sizes if b in m.timed]
    return max(fitting) if fitting else None


def _nothing_measured(spec: WorkloadSpec, m: _Measured, budget: int) -> str:
    if m.untrainable and not m.memory_only:
        sizes = ", ".join(str(b) for b in sorted(m.untrainable))
        first = m.untrainable[min(m.untrainable)].reason
        return f"{spec.model} does not train at any batch tried ({sizes}); {first}"
    first = min(m.memory_only) if m.memory_only else 1
    reason = m.memory_only[first].reason if m.memory_only else "no fit"
    return (f"the memory budget ({budget / 2**20:.0f} MiB) is too small for batch {first} "
            f"of {spec.model} ({reason})"
            + too_large_note(try_memory_components(spec), budget))


def _token_fields(spec: WorkloadSpec, info) -> dict[str, Any]:
    """A language model's workload in tokens: a sample is a sequence of ``seq_len`` ids."""
    if not spec.tokens:
        return {}
    return {"tokens_per_sample": spec.seq_len,
            "flops_per_token": info.flops_per_sample / spec.seq_len}


def _batches_and_fit(m: _Measured, tokens_per_sample: int = 0) -> dict[str, Any]:
    """The timed rows (with ``tokens_per_s`` beside ``samples_per_s`` for a language
    model: samples are sequences of ``tokens_per_sample`` ids) and the lines through them."""
    batches = [_row(m.timed[b]) for b in sorted(m.timed)]
    if tokens_per_sample:
        for r in batches:
            r["tokens_per_s"] = r["samples_per_s"] * tokens_per_sample
    sizes = [r["batch_size"] for r in batches]
    mem_points = {r["batch_size"]: r["peak_memory_bytes"] for r in batches}
    mem_points.update({b: t.peak_memory_bytes for b, t in m.memory_only.items()
                       if t.fits and t.peak_memory_bytes})
    return {
        "batches": batches,
        "fit": {
            "step_s": linear_fit(sizes, [r["step_s"] for r in batches]),
            "memory_bytes": linear_fit(sorted(mem_points),
                                       [mem_points[b] for b in sorted(mem_points)]),
        },
    }


def _environment(dev: torch.device, load_before: float) -> dict[str, Any]:
    """Versions and the device measured (its own name and memory, not device 0's), and the
    load average before and after: ``busy`` when other processes competed for the cores."""
    env = collect_environment(dev.type)
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        env.update(device_name=props.name, device_memory_bytes=int(props.total_memory),
                   device_index=dev.index)
    load_after = os.getloadavg()[0]
    env["loadavg_before"] = load_before
    env["loadavg_after"] = load_after
    # This process adds up to its threads to the load while it measures.
    env["busy"] = bool(load_before > BUSY_LOADAVG
                       or load_after > BUSY_LOADAVG + torch.get_num_threads())
    return env


def _warnings(opts: ProfileOptions, env: dict[str, Any]) -> list[str]:
    warnings = []
    if env["busy"]:
        warnings.append(
            f"the machine was busy while profiling (load average {env['loadavg_before']:.1f} "
            f"before, {env['loadavg_after']:.1f} after, on {os.cpu_count()} cores): other "
            "processes compete for the cores, so step times are slower and noisier than on "
            "an idle machine")
    raised = opts.timed_steps > opts.steps
    if opts.timed_steps < DEFAULT_STEPS:
        asked = (f"{opts.steps} asked, at least {MIN_CUDA_STEPS} on CUDA" if raised
                 else "as asked")
        warnings.append(
            f"{opts.timed_steps} timed step(s) per trial ({asked}; default {DEFAULT_STEPS}): "
            "medians of so few steps are noisy")
    elif raised:
        warnings.append(f"{opts.timed_steps} timed steps per trial ({opts.steps} asked; at "
                        f"least {MIN_CUDA_STEPS} on CUDA)")
    return warnings


def _auto_search(runner, opts, m: _Measured, say):
    """Timed doubling while throughput grows, memory-only probes after: jump, bisect."""
    state = {"best": 0.0, "flat": 0}

    def probe(b: int) -> Probe:
        if state["flat"] < 2:
            say(f"timing batch {b}")
            t = m.add(runner.run(b, "default", opts.warmup, opts.timed_steps), timed=True)
            if t.fits:
                sps = t.timing.samples_per_s
                state["flat"] = 0 if sps > state["best"] * (1 + PLATEAU_GAIN) else \
                    state["flat"] + 1
                state["best"] = max(state["best"], sps)
        else:
            say(f"memory probe at batch {b}")
            t = m.add(runner.run(b, "default", 0, 1, memory_only=True), timed=False)
        return Probe(t.fits, t.peak_memory_bytes if t.fits else None, t.trains)

    return find_max_batch(probe, start=1, cap=opts.max_batch, max_trials=opts.max_trials,
                          budget_bytes=runner.budget_bytes,
                          keep_doubling=lambda: state["flat"] < 2)


def _algorithms(runner, opts, spec, batch, base: Trial, budget, say) -> dict[str, Any]:
    if opts.algorithms == "none":
        return {"chosen": "default", "batch_size": batch, "candidates": [
            {"name": "default", "step_s": base.timing.step_s,
             "peak_memory_bytes": base.peak_memory_bytes, "fits": True}]}
    results = []
    for name in algos.candidates(opts.torch_device, len(spec.input_shape)):
        if name == "default":
            t = base
        else:
            say(f"trying {name} at batch {batch}")
            t = runner.run(batch, name, opts.warmup, opts.timed_steps)
        row = {
            "name": name,
            "step_s": t.timing.step_s if t.timing else None,
            "peak_memory_bytes": t.peak_memory_bytes,
            "fits": t.fits,
            "samples_per_s": t.timing.samples_per_s if t.timing else None,
        }
        if not t.trains:
            row["error"] = t.reason
        results.append(row)
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
