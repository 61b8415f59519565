"""The loader step of ``scalelab compare`` on an image folder, predicted against measured.

Generates an image folder (768 JPEGs of 160 px in 4 classes by default; decoded and
resized to 32x32), then runs :func:`scalelab.experiment.compare.compare` ``--repeats`` times
for a small conv model with 2 workers on loopback at batch 64: the baseline decodes in each
worker (no loader process), the ``loaders`` step runs the plan's loader count. On this
machine each run's figures move with the load from other tenants by 10-20% over seconds,
so the script prints every repeat's step errors and then, per step, the median |error|
over the repeats, with the load average before and after. For the loader steps it prints
the predicted step's two floors: the ideal sharing of the cores
(:func:`scalelab.theory.io.shared_cores_step_s`) and the step measured with every worker
fed by its loaders (``fed_step_s``). Writes ``bench-out/compare_loaders.json``.

    .venv/bin/python benchmarks/compare_loaders.py                # about 2 minutes a repeat
    .venv/bin/python benchmarks/compare_loaders.py --repeats 5 --steps 16

Exit status 0 when the median |error| of the loader step over the repeats is within 15%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOUND = 0.15


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--images", type=int, default=768)
    p.add_argument("--size", type=int, default=160)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--profile-steps", type=int, default=8)
    p.add_argument("--data", default=None, help="use this image folder instead of generating")
    p.add_argument("--out", default="bench-out/compare_loaders.json")
    return p.parse_args(argv)


def _ms(v):
    return "-" if v is None else f"{v * 1e3:.1f}"


def _row(step) -> dict:
    p, m = step["predicted"], step["measured"]
    inp = p.get("input") or {}
    return {"name": step["name"], "loader_workers": step["config"]["loader_workers"],
            "batch_size": step["config"]["batch_size"], "error": step["error"],
            "predicted_step_s": p["step_s"], "measured_step_s": m["step_s"],
            "predicted_io_s": p["io_s"], "measured_data_s": m.get("data_s"),
            "measured_compute_s": m.get("compute_s"), "ideal_step_s": inp.get("ideal_step_s"),
            "fed_step_s": inp.get("fed_step_s"), "contention": step["inputs"]["contention"]}


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)  # the ranks import tests.toy_compare from here
    from scalelab.experiment.compare import CompareOptions, compare
    from scalelab.imagefolder import write_image_folder
    from scalelab.results import write_text_atomic
    from scalelab.workload import WorkloadSpec

    args = _args(argv)
    spec = WorkloadSpec("tests.toy_compare:smallconv", input_shape=(3, 32, 32), num_classes=4)
    load_before, t0 = os.getloadavg(), time.perf_counter()
    repeats = []
    with tempfile.TemporaryDirectory(prefix="scalelab-cmp-") as tmp:
        folder = args.data
        if folder is None:
            folder = str(Path(tmp) / "images")
            info = write_image_folder(folder, args.images, args.size, 4, seed=0)
            print(f"{info.images} JPEGs at {info.size_px} px, {info.total_bytes:,} bytes")
        opts = CompareOptions(workers=2, data=folder, batch_sizes=(args.batch_size,),
                              steps=args.steps, warmup_steps=args.warmup_steps,
                              profile_steps=args.profile_steps)
        for r in range(args.repeats):
            result = compare(spec, opts).to_dict()
            rows = [_row(s) for s in result["steps"]]
            repeats.append({"load_average": list(os.getloadavg()), "rows": rows,
                            "load_s_per_sample": result["profile"]["io"]["load_s_per_sample"]})
            print(f"repeat {r + 1}: t_load {rows[0]['batch_size']} x "
                  f"{repeats[-1]['load_s_per_sample'] * 1e3:.3f} ms/sample; load "
                  f"{os.getloadavg()[0]:.2f}")
            print(f"  {'step':16} {'L':>2} {'pred ms':>8} {'meas ms':>8} {'ideal':>7} "
                  f"{'fed':>7} {'data':>6} {'comp':>6} {'error':>7}")
            for x in rows:
                print(f"  {x['name']:16} {x['loader_workers']:>2} "
                      f"{_ms(x['predicted_step_s']):>8} {_ms(x['measured_step_s']):>8} "
                      f"{_ms(x['ideal_step_s']):>7} {_ms(x['fed_step_s']):>7} "
                      f"{_ms(x['measured_data_s']):>6} {_ms(x['measured_compute_s']):>6} "
                      f"{x['error']:>+7.1%}")
    names = [x["name"] for x in repeats[0]["rows"]]
    medians = {n: statistics.median(abs(x["error"]) for rep in repeats for x in rep["rows"]
                                    if x["name"] == n) for n in names}
    print("median |error| over the repeats: "
          + ", ".join(f"{n} {v:.1%}" for n, v in medians.items()))
    loader = medians.get("loaders", medians.get("recommended"))
    load_after = os.getloadavg()
    print(f"load average {load_before[0]:.2f} -> {load_after[0]:.2f}; "
          f"{time.perf_counter() - t0:.0f} s")
    out = {"config": vars(args), "cpu_count": os.cpu_count(), "repeats": repeats,
           "median_abs_error": medians, "loader_step_median_abs_error": loader,
           "bound": BOUND, "load_average": [load_before[0], load_after[0]]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(out, indent=2) + "\n")
    print(f"-> {args.out}")
    return 0 if loader is not None and loader <= BOUND else 1


if __name__ == "__main__":
    sys.exit(main())
