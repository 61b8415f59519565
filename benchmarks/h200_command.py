"""The shared H200 rows through the command a user runs, from a workload measured on the CPU.

For each row of ``tests/data/h200-torchvision-b128.jsonl`` (one training step of a
torchvision model on one H200, fp32 = PyTorch's defaults, bf16 = autocast + channels_last),
a workload file is written with the model, batch 128, ``device = "cpu"`` and the step
measured on this machine's CPU (one warm-up step, then the median of ``--repeats`` steps;
``--cpu-steps FILE`` reuses the steps of an earlier run's JSON, in the same memory format),
with ``algorithm = "channels_last"`` for the rows the GPU ran in channels_last (the CPU step
is then measured in it too, and the plan keeps the format for the H200), and

    scalelab plan --workload W.toml --nodes 1 --gpus-per-node 1 --device H200 \\
        [--precision bf16] --json

predicts the H200 step. A CPU step says nothing about a GPU's kernels, so the prediction is
the compute model alone (the roofline with the fitted fractions, floored at the host's time
to issue the operations). Prints predicted against measured, the error and the plan's band;
writes JSON.

    python benchmarks/h200_command.py --out bench-out/h200_command.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gpu_compute_check  # this folder is on the path when run as a script

from scalelab.results import write_text_atomic

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "h200-torchvision-b128.jsonl"


def rows(path: Path = DATA) -> list[dict]:
    """The measured rows (lines with a model) of the H200 file."""
    out = []
    for line in path.read_text().splitlines():
        d = json.loads(line) if line.strip() else {}
        if "model" in d:
            out.append(d)
    return out


def channels_last(row: dict) -> bool:
    """Whether the H200 ran the row in channels_last: the shared file's method, as
    ``gpu_compute_check.py`` measures it."""
    return gpu_compute_check.channels_last(row["model"], row["precision"])


def cpu_step_s(model: str, batch: int, side: int, repeats: int, nhwc: bool = False) -> float:
    """The median training step of ``model`` at ``batch`` on this CPU (SGD, cross entropy),
    in channels_last with ``nhwc``."""
    import torch

    from scalelab.workload import WorkloadSpec, logits_of

    spec = WorkloadSpec(model=model, input_shape=(3, side, side))
    net = spec.build_model(seed=0)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, side, side)
    if nhwc:
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, spec.num_classes, (batch,))
    loss_fn = spec.loss_fn()
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(logits_of(net(x)), y).backward()
        opt.step()
        if i:  # the first step warms up
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def predict(row: dict, step_s: float) -> dict:
    """The plan's H200 step for ``row`` from a CPU workload with ``step_s``."""
    with tempfile.TemporaryDirectory() as tmp:
        w = Path(tmp) / "workload.toml"
        side = row.get("side", 224)
        w.write_text(f'model = "{row["model"]}"\nbatch_size = {row["batch"]}\n'
                     f"step_s = {step_s!r}\ndevice = \"cpu\"\n"
                     f"input_shape = [3, {side}, {side}]\n"
                     + ('algorithm = "channels_last"\n' if channels_last(row) else ""))
        cmd = [sys.executable, "-m", "scalelab", "plan", "--workload", str(w), "--nodes", "1",
               "--gpus-per-node", "1", "--device", "H200", "--json", "--out",
               str(Path(tmp) / "plan.json")]
        if row["precision"] != "fp32":
            cmd += ["--precision", row["precision"]]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
        plan = json.loads(done.stdout)
    one = next(r for r in plan["sweep"] if r["gpus"] == 1)
    band = plan.get("band") or {}
    return {"predicted_step_s": one["step_s"], "low_s": one.get("step_s_low"),
            "high_s": one.get("step_s_high"), "band": band,
            "bottleneck": one.get("bottleneck")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-out/h200_command.json")
    ap.add_argument("--repeats", type=int, default=1, help="timed CPU steps per model")
    ap.add_argument("--cpu-steps", metavar="FILE", help="reuse the CPU steps of an earlier run")
    args = ap.parse_args()
    known = {}
    if args.cpu_steps:
        known = {(r["model"], r["batch"], r.get("channels_last", False)): r["cpu_step_s"]
                 for r in json.loads(Path(args.cpu_steps).read_text())["rows"]}
    out = []
    print(f"{'model':14} {'prec':5} {'cpu s':>7} {'meas ms':>8} {'pred ms':>8} {'error':>7} "
          f"{'band':>13} in")
    for row in rows():
        key = (row["model"], row["batch"], channels_last(row))
        if key not in known:
            known[key] = cpu_step_s(row["model"], row["batch"], row.get("side", 224),
                                    args.repeats, nhwc=key[2])
        p = predict(row, known[key])
        err = p["predicted_step_s"] / row["step_s"] - 1.0
        inside = (p["low_s"] is not None and p["low_s"] <= row["step_s"] <= p["high_s"])
        r = {"model": row["model"], "precision": row["precision"], "batch": row["batch"],
             "channels_last": key[2], "cpu_step_s": known[key],
             "measured_step_s": row["step_s"], **p, "error": err, "within_band": inside}
        out.append(r)
        band = (f"{p['low_s'] * 1e3:.1f}-{p['high_s'] * 1e3:.1f}" if p["low_s"] is not None
                else "-")
        print(f"{r['model']:14} {r['precision']:5} {known[key]:7.2f} "
              f"{row['step_s'] * 1e3:8.2f} {p['predicted_step_s'] * 1e3:8.2f} {err:+7.1%} "
              f"{band:>13} {'yes' if inside else 'NO'}")
    errs = sorted(abs(r["error"]) for r in out)
    median = statistics.median(errs)
    inside = sum(r["within_band"] for r in out)
    print(f"{len(out)} rows: median |error| {median:.1%}, max {errs[-1]:.1%}, "
          f"{inside} of {len(out)} inside their band")
    result = {"benchmark": "h200_command", "rows": out, "median_abs_error": median,
              "max_abs_error": errs[-1], "within_band": inside}
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(result, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
