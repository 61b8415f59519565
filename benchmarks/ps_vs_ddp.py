"""Step time of the parameter server with P = W colocated servers against DDP.

Same model, data, optimizer, per-worker batch and workers; the parameter server pushes each
gradient piece the moment backward produces it (overlapping the push with backward), the
servers apply and return pieces while later ones arrive. The two runs alternate
(``--repeats`` pairs, DDP then PS): a shared host's speed drifts over minutes, so each PS
run is set against the DDP run just before it, and the ratio is the median over the pairs.
Goal: PS step / DDP step <= 1.0 at 4 workers.

    python benchmarks/ps_vs_ddp.py --workers 2,4 --out bench-out/ps_vs_ddp.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

from scalelab.results import write_text_atomic
from scalelab.runner import RunConfig, run_training
from scalelab.workload import WorkloadSpec

GOAL, GOAL_WORKERS = 1.0, 4


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--input-shape", default="3,64,64")
    ap.add_argument("--num-classes", type=int, default=100)
    ap.add_argument("--workers", default="2,4",
                    help="comma-separated worker counts (default 2,4)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--piece-size", type=int, default=4 * 2**20)
    ap.add_argument("--repeats", type=int, default=3, help="DDP, PS pairs per worker count")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where workers train (default cpu: the loopback figures)")
    ap.add_argument("--out", default="bench-out/ps_vs_ddp.json")
    args = ap.parse_args(argv)
    spec = WorkloadSpec(args.model, input_shape=args.input_shape, num_classes=args.num_classes)
    rows = []
    print(f"{args.model} {args.input_shape}, batch {args.batch_size} per worker")
    print(f"{'W':>2} {'DDP step ms':>12} {'PS step ms':>11} {'PS/DDP':>7} "
          f"{'PS compute ms':>14} {'PS exchange ms':>15}  each pair's ratio")
    for w in [int(v) for v in args.workers.split(",")]:
        common = dict(workload=spec, workers=w, batch_size=args.batch_size, steps=args.steps,
                      warmup_steps=3, timeout_s=300, device=args.device)
        pairs = []
        for _ in range(args.repeats):
            ddp = run_training(RunConfig(architecture="allreduce", **common))
            ps = run_training(RunConfig(architecture="ps", colocate=True,
                                        piece_bytes=args.piece_size, **common))
            pairs.append((ddp, ps))
        ratios = [p["steps"]["step_s"]["median"] / d["steps"]["step_s"]["median"]
                  for d, p in pairs]

        def med(runs, key, field="median"):
            return statistics.median(r["steps"][key][field] for r in runs)

        ddps, pss = [d for d, _ in pairs], [p for _, p in pairs]
        row = {"workers": w, "ps": w, "repeats": args.repeats,
               "ddp_step_s": med(ddps, "step_s"), "ddp_spread_s": med(ddps, "step_s", "spread"),
               "ps_step_s": med(pss, "step_s"), "ps_spread_s": med(pss, "step_s", "spread"),
               "ratio": statistics.median(ratios), "ratios": ratios,
               "ps_compute_s": med(pss, "compute_s"),
               "ps_exchange_s": med(pss, "exchange_s"),
               "ddp_samples_per_s": statistics.median(r["samples_per_s"] for r in ddps),
               "ps_samples_per_s": statistics.median(r["samples_per_s"] for r in pss),
               "checksums": [pairs[-1][0]["final_param_checksum"],
                             pairs[-1][1]["final_param_checksum"]]}
        rows.append(row)
        print(f"{w:>2} {row['ddp_step_s'] * 1e3:>12.1f} {row['ps_step_s'] * 1e3:>11.1f} "
              f"{row['ratio']:>7.2f} {row['ps_compute_s'] * 1e3:>14.1f} "
              f"{row['ps_exchange_s'] * 1e3:>15.1f}  "
              + " ".join(f"{q:.2f}" for q in ratios))
    worst = max(r["ratio"] for r in rows)
    at_goal = next((r["ratio"] for r in rows if r["workers"] == GOAL_WORKERS), None)
    verdict = (f"at {GOAL_WORKERS} workers {at_goal:.2f} (goal <= {GOAL}: "
               f"{'met' if at_goal <= GOAL else 'not met'})" if at_goal is not None
               else f"the goal is set at {GOAL_WORKERS} workers, not run")
    print(f"PS/DDP step-time ratio, median of the pairs: worst {worst:.2f}; {verdict}")
    result = {"benchmark": "ps_vs_ddp", "torch": torch.__version__, "cpus": os.cpu_count(),
              "model": args.model, "input_shape": args.input_shape,
              "batch_size": args.batch_size, "device": args.device, "rows": rows,
              "worst_ratio": worst, "ratio_at_goal_workers": at_goal,
              "goal": {"ratio": GOAL, "workers": GOAL_WORKERS},
              "goal_met": None if at_goal is None else at_goal <= GOAL}
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
