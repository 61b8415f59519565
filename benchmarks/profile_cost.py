"""What a full profile costs, and how repeatable its step time is.

(a) Cost: a full ``--batch-sizes auto --algorithms auto`` profile, counted as the samples
    its trials processed over the chosen batch, i.e. in units of the selected step time
    (``scalelab.profiler.cost_in_steps``), and also as wall time over the selected step
    time (which adds the trial process's start and the model's description). Goal: at most
    30 step times. Reference, not run here: Lightning's batch-size finder at its defaults
    (``max_trials=25``, ``steps_per_trial=3``) runs up to 25 x 3 = 75 steps, for the batch
    search alone.
(b) Repeatability: the step time at the recommended batch in two separate profiles of the
    same configuration (default timed steps). Goal: within 5%.

Both profiles record whether the machine was busy (``machine_busy``); figures from a busy
machine say so in the output and the JSON.

    python benchmarks/profile_cost.py [--model resnet18 --input-shape 3,64,64]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from scalelab.profiler import ProfileOptions, cost_in_steps, run_profile
from scalelab.results import write_text_atomic
from scalelab.workload import WorkloadSpec, parse_input_shape

LIGHTNING_DEFAULT_STEPS = 25 * 3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--input-shape", default="3,64,64")
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--out", default="bench-out/profile_cost.json")
    args = ap.parse_args()
    spec = WorkloadSpec(args.model, input_shape=parse_input_shape(args.input_shape),
                        num_classes=args.num_classes)

    t0 = time.perf_counter()
    full = run_profile(spec, ProfileOptions(batch_sizes="auto", algorithms="auto"))
    wall_s = time.perf_counter() - t0
    b = full["recommended_batch_size"]
    step_s = full["recommended_step_s"]
    cost = cost_in_steps(full)
    print(f"(a) full profile of {args.model} at {args.input_shape}: recommended batch {b}, "
          f"step {step_s * 1e3:.1f} ms, {full['cost']['trials']} trials, "
          f"{full['cost']['samples_run']} samples, {full['timed_steps']} timed steps per trial")
    print(f"    cost {cost:.1f} step times (goal <= 30; Lightning's finder at its defaults: "
          f"up to {LIGHTNING_DEFAULT_STEPS}); wall {wall_s:.1f} s = {wall_s / step_s:.1f} "
          "step times including the trial process start")

    repeats = [run_profile(spec, ProfileOptions(batch_sizes=[b], algorithms="none"))
               for _ in range(2)]
    again = [r["batches"][0]["step_s"] for r in repeats]
    busy = bool(full["machine_busy"] or any(r["machine_busy"] for r in repeats))
    diff = abs(again[0] - again[1]) / min(again)
    print(f"(b) step time at batch {b} in two profiles: {again[0] * 1e3:.1f} ms and "
          f"{again[1] * 1e3:.1f} ms: {diff * 100:.1f}% apart (goal <= 5%)")
    print(f"    load average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
          + ("; the machine was BUSY: these figures are not an idle machine's" if busy else ""))
    write_text_atomic(args.out, json.dumps({
        "model": args.model, "input_shape": args.input_shape, "recommended_batch_size": b,
        "step_s": step_s, "cost_step_times": cost, "wall_s": wall_s,
        "timed_steps": full["timed_steps"], "machine_busy": busy,
        "untrainable_batches": full["untrainable_batches"],
        "wall_step_times": wall_s / step_s, "trials": full["cost"]["trials"],
        "repeat_step_s": again, "repeat_diff": diff, "loadavg": os.getloadavg()[0],
        "batches": [(r["batch_size"], r["samples_per_s"]) for r in full["batches"]],
        "memory_probes": full["memory_probes"], "algorithms": full["algorithms"],
    }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
