"""How fast the planner sweeps: 1..4,096 devices x 3 architectures x 6 networks.

Every point is one call of ``scalelab.planner.predict_step`` (the model the plan and the
validation use), through ``scalelab.planner.network_sweep``, for AlexNet-sized gradients
(244 MB, 16 tensors placed as even chunks, parameter servers sized automatically) on nodes
of 8 GPUs over NVLink 3. Goal: the whole grid in under one second. The best of a few
repeats is reported (other processes share the cores), with the per-point cost.

    python benchmarks/plan_speed.py --out bench-out/plan_speed.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from scalelab.planner import ARCHITECTURES, Cluster, StepWorkload, network_sweep
from scalelab.results import write_text_atomic

NETWORKS = ("1GbE", "10GbE", "25GbE", "100GbE", "IB-FDR", "IB-NDR")
GOAL_S = 1.0


def one_sweep(max_gpus: int) -> tuple[float, int]:
    work = StepWorkload(244_403_360, 0.171)
    cluster = Cluster(nodes=max_gpus // 8, gpus_per_node=8, network="100GbE",
                      intra_node="nvlink3", architecture="ps")
    t0 = time.perf_counter()
    rows = network_sweep(work, cluster, NETWORKS, range(1, max_gpus + 1), 128, ARCHITECTURES)
    return time.perf_counter() - t0, len(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-gpus", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="bench-out/plan_speed.json")
    args = ap.parse_args()
    times = []
    points = 0
    for _ in range(args.repeats):
        t, points = one_sweep(args.max_gpus)
        times.append(t)
    best = min(times)
    result = {
        "benchmark": "plan_speed",
        "grid": {"devices": [1, args.max_gpus], "architectures": list(ARCHITECTURES),
                 "networks": list(NETWORKS)},
        "points": points,
        "best_s": best,
        "median_s": sorted(times)[len(times) // 2],
        "per_point_us": best / points * 1e6,
        "goal_s": GOAL_S,
        "meets_goal": best < GOAL_S,
        "python": platform.python_version(),
    }
    out = Path(args.out)
    write_text_atomic(out, json.dumps(result, indent=2) + "\n")
    print(f"plan sweep: {points:,} points (1..{args.max_gpus} devices x "
          f"{len(ARCHITECTURES)} architectures x {len(NETWORKS)} networks)")
    print(f"best {best:.3f} s, median {result['median_s']:.3f} s over {args.repeats} runs; "
          f"{result['per_point_us']:.1f} us per point; goal < {GOAL_S:g} s: "
          f"{'met' if result['meets_goal'] else 'NOT met'}")
    print(f"wrote {out}")
    return 0 if result["meets_goal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
