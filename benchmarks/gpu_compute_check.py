"""Bare training steps of torchvision models on a GPU against the compute model's prediction.

Each model's step is measured the way tests/data/h200-torchvision-b128.jsonl was: the model
built with 1000 classes and moved to the GPU; one random batch made once on the GPU (inputs
N(0, 1), integer labels); SGD (lr 0.01, momentum 0.9), cross entropy,
``zero_grad(set_to_none=True)``; 6 warm-up steps, then 20 steps each timed with CUDA events,
the median kept. fp32 is PyTorch's defaults (cuDNN TF32 on, matmul TF32 off, cuDNN
benchmark off); bf16 is ``torch.autocast('cuda', dtype=torch.bfloat16)`` around forward and
loss, with model and input in channels_last for the convolutional networks (not vit_b_16).
inception_v3 runs at 299x299, every other model at 224x224.

The prediction is what ``scalelab plan --profile P.json --nodes 1 --gpus-per-node 1
--device GPU [--precision bf16]`` gives for a profile made on this machine's CPU: the
roofline with the fitted fractions alone (a CPU step says nothing of a GPU's kernels),
floored at the host's time per operation the plan takes from such a profile
(:func:`scalelab.plan.compute.carried_host_s_per_op`): the GPU's own, fitted to its
reference rows where their host set the step, else the one measured on this machine's CPU
(:func:`scalelab.profiler.host.measure_host_s_per_op`).

    python benchmarks/gpu_compute_check.py --out gpu-check-out/compute.json
    python benchmarks/gpu_compute_check.py --models resnet50,vit_b_16 --batches 32,128

The output file is written again after every row (``"complete": false`` until the last),
so a run stopped by a time cap keeps the rows it measured. Without CUDA it says so in one
line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

MODELS = ("resnet18", "resnet50", "resnet152", "vgg16", "alexnet", "densenet121",
          "mobilenet_v2", "efficientnet_b0", "inception_v3", "vit_b_16")
PRECISIONS = ("fp32", "bf16")


def side_of(model: str) -> int:
    return 299 if model == "inception_v3" else 224


def parse_list(text: str, allowed: tuple[str, ...] | None = None) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError("an empty list")
    bad = [t for t in items if allowed is not None and t not in allowed]
    if bad:
        raise ValueError(f"unknown {', '.join(bad)} (known: {', '.join(allowed)})")
    return items


def parse_batches(text: str) -> list[int]:
    try:
        batches = [int(t) for t in parse_list(text)]
    except ValueError as e:
        raise ValueError(f"batches must be integers >= 2: {e}") from None
    if any(b < 2 for b in batches):
        raise ValueError(f"batches must be integers >= 2, got {batches}")
    return batches


def channels_last(model: str, precision: str) -> bool:
    """Whether a step is measured in channels_last: bf16 steps of the convolutional networks
    (as in the shared H200 file)."""
    return precision == "bf16" and model != "vit_b_16"


def predict(model: str, batch: int, precision: str, device_name: str,
            host_s_per_op: float) -> dict:
    """The plan's compute estimate for ``model`` on the GPU ``device_name`` reports."""
    from scalelab import hardware
    from scalelab.hardware.estimate import estimate_step
    from scalelab.opcount import step_ops
    from scalelab.plan.compute import carried_host_s_per_op
    from scalelab.workload import WorkloadSpec

    dev = hardware.match_device(device_name)
    if dev is None or dev.peak_flops("fp32") is None:
        raise ValueError(f"{device_name!r} is not a GPU in scalelab's catalog")
    side = side_of(model)
    ops = step_ops(WorkloadSpec(model=model, input_shape=(3, side, side)), batch)
    ops = replace(ops, channels_last=channels_last(model, precision))  # as measured
    # the host time a plan takes from a profile made here (the GPU's own fitted one first)
    h, note = carried_host_s_per_op(dev, host_s_per_op, "profile", "this machine's CPU")
    est = estimate_step(ops, dev.name, precision, host_s_per_op=h)
    return {"device": dev.name, "predicted_step_s": est.step_s, "band": est.band,
            "bound": est.bound, "host_s": est.host_s, "device_s": est.device_s,
            "host_s_per_op": h, "host_note": note}


def summarize(rows: list[dict]) -> dict:
    """Median and worst |predicted/measured - 1|, and the share inside the band."""
    done = [r for r in rows if r.get("measured_step_s") and r.get("predicted_step_s")]
    if not done:
        return {"points": 0}
    errs = [r["predicted_step_s"] / r["measured_step_s"] - 1 for r in done]
    inside = [abs(e) <= r["band"] for e, r in zip(errs, done)]
    return {"points": len(done), "median_abs_error": statistics.median(map(abs, errs)),
            "max_abs_error": max(map(abs, errs)), "within_band": sum(inside) / len(done)}


def measure(model: str, batch: int, precision: str, warmup: int, steps: int) -> float:
    """Median CUDA-event time of one bare training step (see the module), seconds."""
    import torch
    from torchvision import models as tvm

    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    kwargs = {"aux_logits": True, "init_weights": False} if model == "inception_v3" else {}
    net = getattr(tvm, model)(num_classes=1000, **kwargs).cuda().train()
    side = side_of(model)
    x = torch.randn(batch, 3, side, side, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    if channels_last(model, precision):
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if precision == "bf16" \
        else nullcontext

    def step():
        opt.zero_grad(set_to_none=True)
        with ctx():
            out = net(x)
            out = out.logits if hasattr(out, "logits") else out
            loss = loss_fn(out, y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="32,128,256")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default="bench-out/gpu_compute_check.json")
    args = ap.parse_args(argv)
    try:
        models = parse_list(args.models)
        batches = parse_batches(args.batches)
        precisions = parse_list(args.precisions, PRECISIONS)
        if args.warmup < 0 or args.steps < 1:
            raise ValueError("--warmup must be >= 0 and --steps >= 1")
    except ValueError as e:
        print(f"gpu_compute_check: {e}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("gpu_compute_check: no CUDA device here (torch.cuda.is_available() is False); "
              "run it on a machine with a GPU", file=sys.stderr)
        return 2
    from scalelab.profiler.host import measure_host_s_per_op
    from scalelab.results import write_text_atomic

    name = torch.cuda.get_device_name(0)
    host = measure_host_s_per_op()
    print(f"{name}; host {host.s_per_op * 1e6:.1f} us per operation ({host.method})")
    print(f"{'model':16} {'prec':5} {'batch':>5} {'meas ms':>8} {'pred ms':>8} {'error':>7} "
          f"{'band':>5} bound")
    rows = []
    out = Path(args.out)

    def save(complete: bool) -> None:
        # after every row, atomically: a check stopped by its time cap keeps what it measured
        write_text_atomic(out, json.dumps(
            {"benchmark": "gpu_compute_check", "gpu": name, "torch": torch.__version__,
             "host": host.to_dict(), "complete": complete, "rows": rows,
             "summary": summarize(rows)}, indent=2))

    for model in models:
        for precision in precisions:
            for batch in batches:
                row = {"model": model, "precision": precision, "batch": batch}
                torch.cuda.empty_cache()
                try:
                    row.update(predict(model, batch, precision, name, host.s_per_op))
                    row["measured_step_s"] = measure(model, batch, precision, args.warmup,
                                                     args.steps)
                except (RuntimeError, ValueError) as e:  # out of memory, unknown model
                    row["error_text"] = str(e).splitlines()[0][:200]
                    torch.cuda.empty_cache()
                    print(f"{model:16} {precision:5} {batch:5d} skipped: {row['error_text']}")
                    rows.append(row)
                    save(False)
                    continue
                err = row["predicted_step_s"] / row["measured_step_s"] - 1
                print(f"{model:16} {precision:5} {batch:5d} {row['measured_step_s'] * 1e3:8.2f} "
                      f"{row['predicted_step_s'] * 1e3:8.2f} {err:+7.1%} {row['band']:5.0%} "
                      f"{row['bound']}")
                rows.append(row)
                save(False)
    s = summarize(rows)
    if s["points"]:
        print(f"{s['points']} points: median |error| {s['median_abs_error']:.1%}, max "
              f"{s['max_abs_error']:.1%}, within band {s['within_band']:.0%}")
    save(True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
