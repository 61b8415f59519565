"""Measured peak memory per rank of ZeRO-1/2/3 against the plan's figure for the layout.

Runs ``scalelab run benchmarks.fsdp_memory:mlp --architecture fsdp --zero L --workers 2``
on Gloo for each level and prints, per rank, the peak the rank measured during its timed
steps less its baseline (what the process held besides the model state when the timed
steps began: on the CPU resident bytes, on CUDA allocated bytes) against the plan's
:func:`scalelab.plan.layouts.layout_memory` for that rank, and their ratio.

On the CPU large tensors are taken from mmap (``MALLOC_MMAP_THRESHOLD_``) so that freed
memory leaves the resident set and the process's peak is the tensors' peak.

    python benchmarks/fsdp_memory.py [--device cpu|cuda] [--out fsdp_memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH, DEPTH, CLASSES, BATCH = 2048, 8, 16, 32


def mlp(num_classes: int = CLASSES):
    """8 blocks of Linear(2048, 2048) + ReLU and a classifier: 33.6M parameters."""
    from torch import nn

    blocks = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(DEPTH)]
    return nn.Sequential(*blocks, nn.Linear(WIDTH, num_classes))


def plan_sizes(spec):
    import torch

    from scalelab.plan.layouts import ModelSizes
    from scalelab.profiler.memory import activation_bytes
    from scalelab.runner.fsdp import blocks
    from scalelab.workload import logits_of

    with torch.device("meta"):
        model = spec.build_model(seed=None)
        x = torch.empty((1, *spec.input_shape))
    loss = spec.loss_fn()
    y = torch.zeros(1, dtype=torch.long, device="meta")
    act = activation_bytes(model, x, lambda o: loss(logits_of(o), y))
    input_bytes = 4 * x.numel() + 8
    shapes = tuple(tuple(p.shape) for p in model.parameters() if p.requires_grad)
    units = tuple(sum(p.numel() for p in b.parameters()) for b in blocks(model))
    return ModelSizes(shapes, units, per_sample_bytes=act + input_bytes)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    from scalelab.plan.layouts import layout_memory
    from scalelab.runner import RunConfig, run_training
    from scalelab.workload import WorkloadSpec

    spec = WorkloadSpec("benchmarks.fsdp_memory:mlp", input_shape=(WIDTH,),
                        num_classes=CLASSES)
    sizes = plan_sizes(spec)
    rows = []
    print(f"model {sizes.params:,} parameters, activations+input "
          f"{sizes.per_sample_bytes:,.0f} B/sample, batch {BATCH}, 2 ranks, {args.device}")
    print(f"{'layout':7} {'rank':>4} {'plan MB':>9} {'measured MB':>12} {'ratio':>6}")
    for level in (1, 2, 3):
        r = run_training(RunConfig(workload=spec, workers=2, architecture="fsdp",
                                   shard_level=level, batch_size=BATCH, steps=args.steps,
                                   device=args.device, timeout_s=300))
        for row in r["per_rank"]:
            plan = layout_memory(sizes, 2, f"zero{level}", BATCH, rank=row["rank"])
            got = row["memory"]["peak_model_bytes"]
            ratio = got / plan.total_bytes
            rows.append({"layout": f"zero{level}", "rank": row["rank"],
                         "plan_bytes": plan.total_bytes, "measured_bytes": got,
                         "ratio": ratio, "memory": row["memory"],
                         "plan": {"state": plan.state.total_bytes,
                                  "transient": plan.transient_bytes,
                                  "activations": plan.activation_bytes}})
            print(f"zero{level:<3} {row['rank']:>4} {plan.total_bytes / 1e6:9.1f} "
                  f"{got / 1e6:12.1f} {ratio:6.3f}")
    worst = max(abs(x["ratio"] - 1) for x in rows)
    print(f"largest |measured/plan - 1|: {worst:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"device": args.device, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
