"""Do the guidelines pay? Naive against recommended, measured, one recommendation at a time.

Runs ``scalelab compare`` (:func:`scalelab.experiment.compare.compare`) for an FC-heavy model (an
AlexNet-like network at 64x64 input whose first fully connected layer holds 63% of the
parameters, as AlexNet's fc6 holds 62%) and a conv-heavy one (ResNet-18 at 32x32 input), each
with 2 workers on an emulated network, and prints every step's measured speedup over the
baseline and the prediction error. Writes ``bench-out/guidelines.json``.

    .venv/bin/python benchmarks/guidelines.py            # both models (about 9 minutes at load 8)
    .venv/bin/python benchmarks/guidelines.py --rate 500mbit --steps 6

Needs root and network namespaces (the emulated network). The AlexNet-like model is reached
as ``benchmarks.guidelines:alexnet_like`` (the script puts the repository on the path).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from torch import nn


def alexnet_like(num_classes: int = 10) -> nn.Module:
    """AlexNet's five convolutions and pooling, then 9216 -> 512 -> 512 -> classes.

    At 64x64 input the features are pooled to 256x6x6 as in AlexNet; the 9216x512 fc6
    weight is 63% of the 7.5 M parameters.
    """
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d((6, 6)), nn.Flatten(),
        nn.Linear(256 * 6 * 6, 512), nn.ReLU(inplace=True),
        nn.Linear(512, 512), nn.ReLU(inplace=True),
        nn.Linear(512, num_classes),
    )


MODELS = {
    "alexnet-like": ("benchmarks.guidelines:alexnet_like", (3, 64, 64)),
    "resnet18": ("resnet18", (3, 32, 32)),
}


ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    # the AlexNet-like factory lives here: every process of the runs must import it
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    from scalelab.experiment.compare import CompareOptions, compare
    from scalelab.results import write_json
    from scalelab.theory.units import Bps_to_mbps
    from scalelab.workload import WorkloadSpec

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: "
                    + ", ".join(MODELS))
    ap.add_argument("--rate", default="1gbit", help="emulated link rate (default 1gbit)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--batch-sizes", default="16,32,64,128")
    ap.add_argument("--fresh-profiles", action="store_true",
                    help="time compute and contention again before every step (slower)")
    ap.add_argument("--out", default="bench-out/guidelines.json")
    args = ap.parse_args(argv)

    sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    t0 = time.monotonic()
    load_before = os.getloadavg()
    results = []
    for name in args.models.split(","):
        model, shape = MODELS[name]
        spec = WorkloadSpec(model=model, input_shape=shape, num_classes=10)
        started = time.monotonic()
        r = compare(spec, CompareOptions(workers=args.workers, rate=args.rate,
                                         steps=args.steps, warmup_steps=args.warmup_steps,
                                         batch_sizes=sizes,
                                         fresh_profiles=args.fresh_profiles),
                    progress=lambda text: print(f"  [{time.monotonic() - t0:6.1f} s] {text}",
                                                file=sys.stderr, flush=True)).to_dict()
        r["name"] = name
        r["wall_s"] = time.monotonic() - started
        results.append(r)

    print(f"\n{'model':<13} {'step':<16} {'batch':>5} {'ps':>3} {'partition':<9} "
          f"{'pred/s':>8} {'meas/s':>8} {'speedup':>8} {'pred spd':>8} {'error':>7}")
    for r in results:
        for s in r["steps"]:
            c = s["config"]
            print(f"{r['name']:<13} {s['name']:<16} {c['batch_size']:>5} {c['ps']:>3} "
                  f"{c['partition']:<9} {s['predicted_samples_per_s']:>8.1f} "
                  f"{s['measured_samples_per_s']:>8.1f} {s['speedup']:>7.2f}x "
                  f"{s['predicted_speedup']:>7.2f}x {s['error']:>+7.1%}")
        link = r["link"]
        print(f"{'':<13} link {Bps_to_mbps(link['bandwidth_Bps']):.0f} Mbit/s measured at "
              f"{args.rate}; skipped: {', '.join(s['name'] for s in r['skipped']) or '-'}; "
              f"{r['wall_s']:.0f} s")
    total = time.monotonic() - t0
    load_after = os.getloadavg()
    print(f"\ntotal {total:.0f} s; load average before {load_before[0]:.2f}, after "
          f"{load_after[0]:.2f} (other processes share the cores)")
    write_json(args.out, "compare", {
        "benchmark": "guidelines", "rate": args.rate, "workers": args.workers,
        "steps": [dict(s, model=r["name"]) for r in results for s in r["steps"]],
        "comparisons": results, "total_s": total,
        "load_average": {"before": list(load_before), "after": list(load_after)}})
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
