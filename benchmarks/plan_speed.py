"""How fast the planner sweeps, and how long the ``scalelab`` command takes as a whole.

The sweep: 1..4,096 devices x 3 architectures x 6 networks. Every point is one call of
``scalelab.plan.predict_step`` (the model the plan and the validation use), through
``scalelab.plan.network_sweep``, for AlexNet-sized gradients (244 MB, 16 tensors placed
as even chunks, parameter servers sized automatically) on nodes of 8 GPUs over NVLink 3.
Goal: the whole grid in under one second. The best of a few repeats is reported (other
processes share the cores), with the per-point cost.

The command (``--commands``, on by default): wall time of whole processes, the median of
``--runs`` each, of ``scalelab --help`` (goal <= 0.5 s) and of ``scalelab plan --workload
examples/workload.toml --cluster examples/cluster-4x8-a100-100gbe.toml`` (a named model
estimated on another device): warm, every count in the cache (goal <= 1 s); first, the
cache holding only what ``scalelab hardware fit`` leaves there (the first plan after the
fit); and cold, the cache empty (``--cold-runs``, default 1). Where the package's own fit
(``hardware/fit.json``) is current, no plan fits the reference table and ``hardware fit``
leaves nothing, so first and cold both count the workload's model alone; where it is
stale, first reads the fit and the reference models' counts from the cache and cold
counts and fits the whole table. Goal for the first and the cold plan: <= 6 s (cold: where
the package's fit is current; ``packaged_fit`` in the output says whether it was). Each
first plan follows, in turn, a process that only imports torch and torchvision (``import``):
what no first plan can avoid on this host, and the first plan less it is the plan's own
share. The cache is a fresh folder (``SCALELAB_CACHE_DIR``), never the user's.

Language models (``--no-lm`` leaves them out): ``scalelab plan --model llama3-70b
--seq-len 8192 --cluster examples/llm-8x8-h100-ndr.toml`` first (an empty cache each time;
goal <= 6 s) and warm (goal <= 1 s), and the search over every layout of llama3-405b on
2,048 x 8 = 16,384 H100-SXM (goal <= 2 s, whole process); each with the layouts its search
considered, memory-checked and evaluated.

    python benchmarks/plan_speed.py --out bench-out/plan_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scalelab.hardware import packaged
from scalelab.plan import ARCHITECTURES, Cluster, StepWorkload, network_sweep
from scalelab.results import write_text_atomic

NETWORKS = ("1GbE", "10GbE", "25GbE", "100GbE", "IB-FDR", "IB-NDR")
GOAL_S = 1.0
ROOT = Path(__file__).resolve().parents[1]
HELP_GOAL_S, WARM_GOAL_S, FIRST_GOAL_S = 0.5, 1.0, 6.0
PLAN_ARGS = ("plan", "--workload", str(ROOT / "examples" / "workload.toml"), "--cluster",
             str(ROOT / "examples" / "cluster-4x8-a100-100gbe.toml"))
# language models (scalelab.plan.lm): llama3-70b on 8 x 8 H100-SXM over NDR InfiniBand, and
# the search over every layout of llama3-405b on 2,048 x 8 = 16,384 H100-SXM
LM70_ARGS = ("plan", "--model", "llama3-70b", "--seq-len", "8192", "--cluster",
             str(ROOT / "examples" / "llm-8x8-h100-ndr.toml"))
LM405_ARGS = ("plan", "--model", "llama3-405b", "--seq-len", "8192", "--nodes", "2048",
              "--gpus-per-node", "8", "--device", "H100-SXM", "--network", "IB-NDR")
LM405_GOAL_S = 2.0
# What the first plan cannot avoid: a process that imports torch and torchvision, nothing else
IMPORT_ARGS = ["-c", "import torch, torchvision"]


def one_sweep(max_gpus: int) -> tuple[float, int]:
    work = StepWorkload(244_403_360, 0.171)
    cluster = Cluster(nodes=max_gpus // 8, gpus_per_node=8, network="100GbE",
                      intra_node="nvlink3", architecture="ps")
    t0 = time.perf_counter()
    rows = network_sweep(work, cluster, NETWORKS, range(1, max_gpus + 1), 128, ARCHITECTURES)
    return time.perf_counter() - t0, len(rows)


def wall_s(args: list[str], cache: Path, before=None, module: bool = True
           ) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``python -m scalelab ARGS`` process (``python ARGS`` when
    not ``module``; ``before()`` runs first, untimed)."""
    if before is not None:
        before()
    env = {**os.environ, "SCALELAB_CACHE_DIR": str(cache)}
    env.pop("SCALELAB_CACHE", None)
    argv = [sys.executable, *(["-m", "scalelab"] if module else []), *args]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cache,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[1:])} failed: {done.stderr.strip()[-500:]}")
    return t, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)


def lm_times(runs: int) -> tuple[dict, dict]:
    """Whole processes of the language-model plans: llama3-70b first (an empty cache each
    time) and warm (after a plan filled it), llama3-405b on 16,384 GPUs warm; with what each
    search covered (plan.json's ``search``)."""
    with tempfile.TemporaryDirectory(prefix="scalelab-bench-lm-") as tmp:
        cache = Path(tmp)
        out70, out405 = cache / "lm70.json", cache / "lm405.json"
        p70, p405 = [*LM70_ARGS, "--out", str(out70)], [*LM405_ARGS, "--out", str(out405)]

        def empty():
            for p in list(cache.iterdir()):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)

        series = {"lm70b_first": [wall_s(p70, cache, empty) for _ in range(runs)]}
        wall_s(p70, cache)
        series["lm70b_warm"] = [wall_s(p70, cache) for _ in range(runs)]
        wall_s(p405, cache)
        series["lm405b_16384_warm"] = [wall_s(p405, cache) for _ in range(runs)]
        searched = {}
        for name, path in (("lm70b", out70), ("lm405b_16384", out405)):
            data = json.loads(path.read_text())
            r = data["recommendation"]
            searched[name] = {**{k: data["search"][k] for k in
                                 ("considered", "memory_checked", "evaluated", "seconds")},
                              "recommendation": r["describe"], "tokens_per_s": r["tokens_per_s"],
                              "mfu": r["mfu"], "memory_bytes": r["memory_bytes"]}
    goals = {"lm70b_first": FIRST_GOAL_S, "lm70b_warm": WARM_GOAL_S,
             "lm405b_16384_warm": LM405_GOAL_S}
    return _summaries(series, goals), searched


def _summaries(series: dict, goals: dict) -> dict:
    out = {}
    for name, runs_ in series.items():
        walls, cpus = [w for w, _ in runs_], [c for _, c in runs_]
        if walls:
            med = statistics.median(walls)
            out[name] = {"median_s": med, "runs_s": walls, "median_cpu_s":
                         statistics.median(cpus), "cpu_s": cpus, "goal_s": goals.get(name),
                         "meets_goal": name not in goals or med <= goals[name]}
    return out


def command_times(runs: int, cold_runs: int) -> dict:
    """Medians (and all runs) of --help and of plan warm, first time and cold."""
    with tempfile.TemporaryDirectory(prefix="scalelab-bench-") as tmp:
        cache = Path(tmp)
        plan = [*PLAN_ARGS, "--out", str(cache / "plan.json")]

        def empty():
            for kind in ("ops", "describe", "memory", "fit"):
                shutil.rmtree(cache / kind, ignore_errors=True)

        def fitted_only():
            for p in cache.glob("*/*.pkl"):
                if p not in fitted:
                    p.unlink()

        series = {"help": [wall_s(["--help"], cache) for _ in range(runs)]}
        wall_s(["hardware", "fit"], cache)  # the fit and the reference models' counts
        fitted = set(cache.glob("*/*.pkl"))
        wall_s(IMPORT_ARGS, cache, module=False)  # warm-up: the libraries read from disk once
        series["plan_first"], series["import"] = [], []
        for _ in range(runs):  # in turn, so that both see the same load
            series["import"].append(wall_s(IMPORT_ARGS, cache, module=False))
            series["plan_first"].append(wall_s(plan, cache, fitted_only))
        wall_s(plan, cache)  # warm-up: everything counted
        series["plan_warm"] = [wall_s(plan, cache) for _ in range(runs)]
        series["plan_cold"] = [wall_s(plan, cache, empty) for _ in range(cold_runs)]
    goals = {"help": HELP_GOAL_S, "plan_warm": WARM_GOAL_S, "plan_first": FIRST_GOAL_S}
    if packaged.current() is not None:
        goals["plan_cold"] = FIRST_GOAL_S
    return _summaries(series, goals)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-gpus", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="bench-out/plan_speed.json")
    ap.add_argument("--runs", type=int, default=5, help="processes per command figure")
    ap.add_argument("--cold-runs", type=int, default=1,
                    help="processes with an empty cache (each fits the whole reference table)")
    ap.add_argument("--no-commands", dest="commands", action="store_false",
                    help="time the sweep only")
    ap.add_argument("--no-lm", dest="lm", action="store_false",
                    help="leave out the language-model plans")
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
    if args.commands:
        result["command"] = command_times(args.runs, args.cold_runs)
        result["packaged_fit"] = packaged.current() is not None
        # each first plan less the import timed just before it
        result["own_share_s"] = [p - i for p, i in zip(result["command"]["plan_first"]["runs_s"],
                                                      result["command"]["import"]["runs_s"])]
        if args.lm:
            lm, result["lm_search"] = lm_times(args.runs)
            result["command"].update(lm)
    out = Path(args.out)
    write_text_atomic(out, json.dumps(result, indent=2) + "\n")
    print(f"plan sweep: {points:,} points (1..{args.max_gpus} devices x "
          f"{len(ARCHITECTURES)} architectures x {len(NETWORKS)} networks)")
    print(f"best {best:.3f} s, median {result['median_s']:.3f} s over {args.repeats} runs; "
          f"{result['per_point_us']:.1f} us per point; goal < {GOAL_S:g} s: "
          f"{'met' if result['meets_goal'] else 'NOT met'}")
    met = result["meets_goal"]
    for name, c in result.get("command", {}).items():
        met = met and c["meets_goal"]
        goal = ("no goal" if c["goal_s"] is None else
                f"goal <= {c['goal_s']:g} s: {'met' if c['meets_goal'] else 'NOT met'}")
        print(f"{name:10s} median {c['median_s']:.2f} s wall over {len(c['runs_s'])} processes "
              f"(min {min(c['runs_s']):.2f}, max {max(c['runs_s']):.2f}; CPU "
              f"{c['median_cpu_s']:.2f} s); {goal}")
    for name, c in (result.get("lm_search") or {}).items():
        print(f"{name}: {c['considered']:,} layouts ({c['memory_checked']:,} memory-checked, "
              f"{c['evaluated']:,} evaluated) in {c['seconds']:.2f} s of the process; "
              f"recommends {c['recommendation']}: {c['tokens_per_s']:,.0f} tokens/s, MFU "
              f"{c['mfu']:.1%}, {c['memory_bytes'] / 2**30:.1f} GiB per GPU")
    if "own_share_s" in result:
        own = result["own_share_s"]
        print(f"plan_first less the import run just before it: median "
              f"{statistics.median(own):.2f} s (min {min(own):.2f}, max {max(own):.2f}), "
              "the plan's own share")
    print(f"wrote {out}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
