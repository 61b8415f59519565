"""Warm starts against new interpreters: what it costs to start a job's processes.

Each case runs as a whole process, once with ``SCALELAB_WARM_START=1`` (ranks and timing
processes forked from a warm interpreter, :mod:`scalelab.runner.warmstart`) and once with
``=0`` (each a new ``python -m``), in turn, ``--repeats`` pairs, so that a change of load
falls on both. Wall time from outside; CPU time of the whole process tree (every rank and
the warm interpreter are reaped inside it, so the kernel adds their time to the
command's). Each figure is the median over the repeats; each ratio is warm / new within one
pair, then the median (and the range).

Cases (resnet18 at 3x32x32, batch 8, 6 steps, on the CPU):

- ``run``: ``scalelab run`` with one parameter server and two workers, three ranks.
- ``runs3``: one process that trains three such jobs one after another, as ``validate``
  and ``compare`` do.

    python benchmarks/warm_start.py --repeats 5      # writes bench-out/warm_start.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARGS = ["resnet18", "--input-shape", "3,32,32", "--num-classes", "10", "--workers", "2",
        "--ps", "1", "--batch-size", "8", "--steps", "6", "--warmup-steps", "2",
        "--device", "cpu", "--quiet"]


def inner_runs(n: int) -> None:
    """Train ``n`` jobs one after another in this process."""
    from scalelab.runner import RunConfig, run_training
    from scalelab.workload import WorkloadSpec

    spec = WorkloadSpec("resnet18", input_shape=(3, 32, 32), num_classes=10)
    for _ in range(n):
        run_training(RunConfig(spec, workers=2, ps=1, batch_size=8, steps=6, warmup_steps=2,
                               device="cpu"))


def timed(cmd: list[str], warm: bool) -> tuple[float, float]:
    """(wall s, CPU s of the whole tree) of one run of ``cmd``."""
    env = {**os.environ, "SCALELAB_WARM_START": "1" if warm else "0"}
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace").strip()
    p.stderr.close()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}: {err[-300:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--case", choices=["run", "runs3"], action="append")
    ap.add_argument("--out", default="bench-out/warm_start.json")
    ap.add_argument("--inner-runs", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner_runs:
        inner_runs(args.inner_runs)
        return
    scratch = tempfile.mkdtemp(prefix="warm-start-")  # run.json and its rank lines
    cases = {"run": [sys.executable, "-m", "scalelab", "run", *ARGS, "--out",
                     os.path.join(scratch, "run.json")],
             "runs3": [sys.executable, __file__, "--inner-runs", "3"]}
    load = [os.getloadavg()[0]]
    print(f"load average at start: {load[0]:.2f}; {args.repeats} pairs, warm and new in turn")
    out = {"repeats": args.repeats, "cases": {}}
    for name in args.case or list(cases):
        rows = {True: [], False: []}
        for _ in range(args.repeats):
            for warm in (True, False):
                rows[warm].append(timed(cases[name], warm))
        ratios_wall = [w[0] / c[0] for w, c in zip(rows[True], rows[False])]
        ratios_cpu = [w[1] / c[1] for w, c in zip(rows[True], rows[False])]
        for i, what in ((0, "wall"), (1, "CPU ")):
            warm = statistics.median(r[i] for r in rows[True])
            new = statistics.median(r[i] for r in rows[False])
            rs = ratios_wall if i == 0 else ratios_cpu
            print(f"{name:6s} {what} s: warm {warm:6.2f}  new {new:6.2f}  warm/new "
                  f"{statistics.median(rs):.2f} ({min(rs):.2f}-{max(rs):.2f})")
        out["cases"][name] = {"command": cases[name][1:], "warm": rows[True],
                              "new": rows[False], "wall_ratio": ratios_wall,
                              "cpu_ratio": ratios_cpu}
    shutil.rmtree(scratch, ignore_errors=True)
    load.append(os.getloadavg()[0])
    print(f"load average at end: {load[1]:.2f}")
    from scalelab.results import write_text_atomic

    out["load_average"] = load
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(out, indent=2) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
