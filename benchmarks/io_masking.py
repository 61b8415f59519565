"""Does masking I/O pay? Exposed input time measured for 0, 1, 2 loader processes against
the prediction.

On a generated image folder (JPEGs, :func:`scalelab.imagefolder.write_image_folder`) a
small conv model trains with one worker (``scalelab run --data DIR --loader-workers L``,
one torch thread) for L = 0, 1, 2. Per L the script takes the median over repeats of the
measured ``data_s`` (the time the step waited for its batch) and ``step_s``, and compares
them with the prediction from two inputs measured separately:

- ``t_load``: ``load_s_per_batch`` as ``scalelab profile --data`` measures it
  (:func:`scalelab.profiler.input_pipeline.profile_input`, the main process decoding);
- ``T_C``: the step without input, the same run on synthetic data (``step_s - data_s``).

Both are measured again in every repeat, just before that repeat's runs, and each run is
predicted from its own repeat's figures. The prediction assumes every process has a core;
on a shared machine that fails whenever other work runs, so each run records its CPU share
(CPU time over busy time) and a repeat counts as quiet when the synthetic run, the profile
and the run each had at least 85% of a core. Medians are over the quiet repeats (over all,
when none was quiet); every run is in the JSON.

prediction: exposed = :func:`scalelab.theory.io.node_exposed_io_s` with the cores this
machine has free for loaders (its cores less the training process's one thread), step =
``T_C + exposed``. The step error is relative to the predicted step; the ``data_s`` error
is relative to the predicted step too, since the predicted exposed time is 0 once hidden.
Each run records the 1-minute load average before and after (the machine may be shared).
Writes ``bench-out/io_masking.json``.

    .venv/bin/python benchmarks/io_masking.py                  # about 2 minutes
    .venv/bin/python benchmarks/io_masking.py --repeats 5 --images 1024

The model is reached as ``benchmarks.io_masking:smallconv`` (the script puts the
repository on the path so every rank can import it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torch import nn

ROOT = Path(__file__).resolve().parents[1]
MODEL = "benchmarks.io_masking:smallconv"


def smallconv(num_classes: int = 4) -> nn.Module:
    """Three 3x3 convolutions (16, 16, 32 channels), max-pool, global average, linear."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"load average {os.getloadavg()}"


QUIET_SHARE = 0.85  # a run whose process got less of a core than this was contended


def _run(spec, args, data: str | None, loaders: int) -> dict:
    """One run; ``cpu_share`` is the training process's CPU time over its busy time (the
    step, less the wait for a loader process), about 1 when it had a core to itself."""
    from scalelab.runner import RunConfig, run_training

    load_before = os.getloadavg()[0]
    result = run_training(RunConfig(
        workload=spec, workers=1, architecture="allreduce", batch_size=args.batch_size,
        steps=args.steps, warmup_steps=args.warmup_steps, data=data, loader_workers=loaders,
        threads=1, seed=0, timeout_s=120, device="cpu"))
    st = result["steps"]
    busy = st["step_s"]["median"] - (st["data_s"]["median"] if data and loaders else 0.0)
    return {"loader_workers": loaders if data else None, "data": "folder" if data else
            "synthetic", "data_s": st["data_s"]["median"], "step_s": st["step_s"]["median"],
            "step_s_spread": st["step_s"]["spread"], "cpu_s": st["cpu_s"]["median"],
            "cpu_share": st["cpu_s"]["median"] / busy,
            "loadavg_before": load_before, "loadavg_after": os.getloadavg()[0]}


def _profile_load(folder: str, args, compute_s: float) -> dict:
    from scalelab.profiler.input_pipeline import profile_input

    wall, cpu = time.perf_counter(), time.process_time()
    io = profile_input(folder, args.input_shape, args.batch_size, compute_s,
                       worker_counts=(0,), batches=args.profile_batches)
    share = (time.process_time() - cpu) / (time.perf_counter() - wall)
    return {"load_s_per_batch": io["load_s_per_batch"], "cpu_share": share}


def measure(args, folder: str) -> list[dict]:
    """Per repeat: T_C (synthetic run), t_load (profile), then one run per loader count,
    each row with the prediction from its own repeat's T_C and t_load."""
    from scalelab.theory import io as theory_io
    from scalelab.workload import WorkloadSpec

    spec = WorkloadSpec(MODEL, input_shape=args.input_shape, num_classes=args.classes)
    free_cores = max(1, (os.cpu_count() or 1) - 1)  # less the training process's thread
    rows = []
    for r in range(args.repeats):
        print(f"repeat {r + 1}/{args.repeats}: {_uptime()}", flush=True)
        syn = _run(spec, args, None, 0)
        compute_s = syn["step_s"] - syn["data_s"]
        prof = _profile_load(folder, args, compute_s)
        quiet_inputs = min(syn["cpu_share"], prof["cpu_share"]) >= QUIET_SHARE
        print(f"  T_C {compute_s * 1e3:.2f} ms (cpu share {syn['cpu_share']:.2f}), t_load "
              f"{prof['load_s_per_batch'] * 1e3:.2f} ms (cpu share {prof['cpu_share']:.2f})")
        for loaders in args.loaders:
            run = _run(spec, args, folder, loaders)
            exposed = theory_io.node_exposed_io_s(prof["load_s_per_batch"], loaders,
                                                  compute_s, gpus_per_node=1,
                                                  cpu_cores=free_cores)
            rows.append({**run, "repeat": r, "compute_s": compute_s,
                         "load_s_per_batch": prof["load_s_per_batch"],
                         "synthetic": syn, "profile": prof,
                         "predicted_exposed_s": exposed, "predicted_step_s": compute_s + exposed,
                         "quiet": quiet_inputs and run["cpu_share"] >= QUIET_SHARE})
            print(f"  L={loaders}: data_s {run['data_s'] * 1e3:7.2f} ms (pred "
                  f"{exposed * 1e3:6.2f})  step_s {run['step_s'] * 1e3:7.2f} ms (pred "
                  f"{(compute_s + exposed) * 1e3:6.2f})  cpu share {run['cpu_share']:.2f}  "
                  f"load {run['loadavg_before']:.2f}->{run['loadavg_after']:.2f}", flush=True)
    return rows


def summarize(args, rows: list[dict]) -> list[dict]:
    """Per loader count, medians over the quiet repeats (all repeats when none was quiet)."""
    out = []
    for loaders in args.loaders:
        mine = [r for r in rows if r["loader_workers"] == loaders]
        quiet = [r for r in mine if r["quiet"]]
        use = quiet or mine
        m = {k: statistics.median(r[k] for r in use)
             for k in ("compute_s", "load_s_per_batch", "predicted_exposed_s",
                       "predicted_step_s", "data_s", "step_s")}
        out.append({"loader_workers": loaders, "repeats": len(mine), "quiet_repeats": len(quiet),
                    "compute_s": m["compute_s"], "load_s_per_batch": m["load_s_per_batch"],
                    "predicted_exposed_s": m["predicted_exposed_s"],
                    "measured_data_s": m["data_s"], "predicted_step_s": m["predicted_step_s"],
                    "measured_step_s": m["step_s"],
                    "step_error": (m["step_s"] - m["predicted_step_s"]) / m["predicted_step_s"],
                    "data_error_of_step": (m["data_s"] - m["predicted_exposed_s"])
                    / m["predicted_step_s"],
                    "loadavg_max": max(max(r["loadavg_before"], r["loadavg_after"])
                                       for r in use)})
    return out


def _table(rows: list[dict]) -> str:
    lines = [f"{'L':>2} {'T_C':>9} {'t_load':>9} {'exposed pred':>13} {'data_s meas':>12} "
             f"{'step pred':>10} {'step meas':>10} {'step err':>9} {'data err':>9} "
             f"{'quiet':>5} {'load':>5}"]
    for r in rows:
        lines.append(
            f"{r['loader_workers']:>2} {r['compute_s'] * 1e3:>6.2f} ms "
            f"{r['load_s_per_batch'] * 1e3:>6.2f} ms "
            f"{r['predicted_exposed_s'] * 1e3:>10.2f} ms "
            f"{r['measured_data_s'] * 1e3:>9.2f} ms {r['predicted_step_s'] * 1e3:>7.2f} ms "
            f"{r['measured_step_s'] * 1e3:>7.2f} ms {r['step_error']:>+9.1%} "
            f"{r['data_error_of_step']:>+9.1%} {r['quiet_repeats']:>2}/{r['repeats']:<2} "
            f"{r['loadavg_max']:>5.2f}")
    return "\n".join(lines)


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=768)
    p.add_argument("--size", type=int, default=160, metavar="PX", help="JPEG side (pixels)")
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--input-shape", default="3,32,32")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=18)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile-batches", type=int, default=8)
    p.add_argument("--loaders", default="0,1,2")
    p.add_argument("--data", default=None, help="use this image folder instead of generating")
    p.add_argument("--out", default="bench-out/io_masking.json")
    args = p.parse_args(argv)
    args.input_shape = tuple(int(v) for v in args.input_shape.split(","))
    args.loaders = [int(v) for v in args.loaders.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    from scalelab.imagefolder import write_image_folder
    from scalelab.results import write_text_atomic
    from scalelab.theory import io as theory_io

    args = _args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scalelab-io-") as tmp:
        folder = args.data
        if folder is None:
            folder = str(Path(tmp) / "images")
            info = write_image_folder(folder, args.images, args.size, args.classes, seed=0)
            print(f"{info.images} JPEGs at {info.size_px} px, {info.total_bytes:,} bytes")
        runs = measure(args, folder)
    rows = summarize(args, runs)
    recommended = theory_io.loader_workers_needed(rows[0]["load_s_per_batch"],
                                                  rows[0]["compute_s"])
    print(_table(rows))
    print(f"recommended L = ceil(t_load / T_C) = {recommended}; quiet: the training process "
          f"and the profile had >= {QUIET_SHARE:.0%} of a core")
    by_l = {r["loader_workers"]: r for r in rows}
    hidden = None
    if 0 in by_l and recommended in by_l:
        hidden = by_l[recommended]["measured_data_s"] / by_l[0]["measured_data_s"]
        print(f"exposed input at L=0 {by_l[0]['measured_data_s'] * 1e3:.2f} ms; at the "
              f"recommended L={recommended} {by_l[recommended]['measured_data_s'] * 1e3:.2f} "
              f"ms ({hidden:.1%} of it); steps {by_l[0]['measured_step_s'] * 1e3:.2f} -> "
              f"{by_l[recommended]['measured_step_s'] * 1e3:.2f} ms")
    worst = max(abs(r["step_error"]) for r in rows)
    print(f"largest step error {worst:.1%} (bound 15%); {_uptime()}; "
          f"{time.perf_counter() - t0:.0f} s")
    out = {"config": dict(vars(args)), "cpu_count": os.cpu_count(),
           "quiet_share": QUIET_SHARE, "recommended_loader_workers": recommended,
           "rows": rows, "hidden_fraction_at_recommended": hidden,
           "max_abs_step_error": worst, "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(out, indent=2) + "\n")
    print(f"-> {args.out}")
    return 0 if worst <= 0.15 else 1


if __name__ == "__main__":
    sys.exit(main())
