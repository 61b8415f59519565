"""Step time of the parameter server with P = W colocated servers against DDP.

Same model, data, optimizer, per-worker batch and workers; the parameter server pushes each
gradient piece the moment backward produces it (overlapping the push with backward), the
servers apply and return pieces while later ones arrive. Goal: PS step / DDP step <= 1.2.

    python benchmarks/ps_vs_ddp.py --out bench-out/ps_vs_ddp.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from scalelab.results import write_text_atomic
from scalelab.runner import RunConfig, run_training
from scalelab.workload import WorkloadSpec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--input-shape", default="3,64,64")
    ap.add_argument("--num-classes", type=int, default=100)
    ap.add_argument("--workers", default="2", help="comma-separated worker counts (default 2)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--piece-size", type=int, default=4 * 2**20)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where workers train (default cpu: the loopback figures)")
    ap.add_argument("--out", default="bench-out/ps_vs_ddp.json")
    args = ap.parse_args(argv)
    spec = WorkloadSpec(args.model, input_shape=args.input_shape, num_classes=args.num_classes)
    rows = []
    print(f"{args.model} {args.input_shape}, batch {args.batch_size} per worker")
    print(f"{'W':>2} {'DDP step ms':>12} {'PS step ms':>11} {'PS/DDP':>7} "
          f"{'PS compute ms':>14} {'PS exchange ms':>15}")
    for w in [int(v) for v in args.workers.split(",")]:
        common = dict(workload=spec, workers=w, batch_size=args.batch_size, steps=args.steps,
                      warmup_steps=3, timeout_s=300, device=args.device)
        ddp = run_training(RunConfig(architecture="allreduce", **common))
        ps = run_training(RunConfig(architecture="ps", colocate=True,
                                    piece_bytes=args.piece_size, **common))
        d, p = ddp["steps"]["step_s"], ps["steps"]["step_s"]
        row = {"workers": w, "ps": w, "ddp_step_s": d["median"], "ddp_spread_s": d["spread"],
               "ps_step_s": p["median"], "ps_spread_s": p["spread"],
               "ratio": p["median"] / d["median"],
               "ps_compute_s": ps["steps"]["compute_s"]["median"],
               "ps_exchange_s": ps["steps"]["exchange_s"]["median"],
               "ddp_samples_per_s": ddp["samples_per_s"], "ps_samples_per_s": ps["samples_per_s"],
               "checksums": [ddp["final_param_checksum"], ps["final_param_checksum"]]}
        rows.append(row)
        print(f"{w:>2} {d['median'] * 1e3:>12.1f} {p['median'] * 1e3:>11.1f} {row['ratio']:>7.2f} "
              f"{row['ps_compute_s'] * 1e3:>14.1f} {row['ps_exchange_s'] * 1e3:>15.1f}")
    worst = max(r["ratio"] for r in rows)
    print(f"worst PS/DDP step-time ratio {worst:.2f} (goal <= 1.2: "
          f"{'met' if worst <= 1.2 else 'not met'})")
    result = {"benchmark": "ps_vs_ddp", "torch": torch.__version__, "cpus": os.cpu_count(),
              "model": args.model, "input_shape": args.input_shape,
              "batch_size": args.batch_size, "device": args.device, "rows": rows,
              "worst_ratio": worst,
              "goal_met": worst <= 1.2}
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
