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

Where a step misses, which operations make it miss: ``--class-batches 128`` profiles one
more step of each row at that batch (``torch.profiler``, CUDA activity, shapes recorded) and
sets each operation class's kernel time beside the roofline's for that class
(:func:`predicted_classes`, the plan's fractions and factors). A kernel belongs to the ATen
operation that launched it, classed as the operation count classes it
(:func:`scalelab.opclasses.op_class`; a convolution grouped or not by its recorded shapes,
convolutions of inputs with at most 4 channels, a network's first layer, also summed apart;
autocast's casts element-wise; the optimizer's step ``optimizer``). The kernels' total
against the step says how long the device waited (launches, the host).

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


def _target(device_name: str):
    """The catalog GPU that ``device_name`` (as CUDA reports it) is."""
    from scalelab import hardware

    dev = hardware.match_device(device_name)
    if dev is None or dev.peak_flops("fp32") is None:
        raise ValueError(f"{device_name!r} is not a GPU in scalelab's catalog")
    return dev


def _step_ops(model: str, batch: int, precision: str):
    """The counted step of ``model`` in the memory format it is measured in."""
    from scalelab.opcount import step_ops
    from scalelab.workload import WorkloadSpec

    side = side_of(model)
    ops = step_ops(WorkloadSpec(model=model, input_shape=(3, side, side)), batch)
    return replace(ops, channels_last=channels_last(model, precision))  # as measured


def predict(model: str, batch: int, precision: str, device_name: str,
            host_s_per_op: float) -> dict:
    """The plan's compute estimate for ``model`` on the GPU ``device_name`` reports."""
    from scalelab.hardware.estimate import estimate_step
    from scalelab.plan.compute import carried_host_s_per_op

    dev = _target(device_name)
    ops = _step_ops(model, batch, precision)
    # the host time a plan takes from a profile made here (the GPU's own fitted one first)
    h, note = carried_host_s_per_op(dev, host_s_per_op, "profile", "this machine's CPU")
    est = estimate_step(ops, dev.name, precision, host_s_per_op=h)  # with the plan's fit
    return {"device": dev.name, "predicted_step_s": est.step_s, "band": est.band,
            "bound": est.bound, "host_s": est.host_s, "device_s": est.device_s,
            "host_s_per_op": h, "host_note": note}


def class_line(row: dict) -> str:
    """Each class's kernel time against the roofline's, and the kernels' total against the
    step (what is left is time the device waited: launches, the host, synchronization)."""
    m, p = row["measured_classes"], row["predicted_classes"]
    names = sorted(set(m["classes_s"]) | set(p), key=lambda c: -m["classes_s"].get(c, 0.0))
    parts = [f"{c} {m['classes_s'].get(c, 0.0) * 1e3:.1f}/{p.get(c, 0.0) * 1e3:.1f}"
             for c in names]
    if m["conv_small_input_s"]:
        parts.append(f"(conv of <= 4 channels {m['conv_small_input_s'] * 1e3:.1f})")
    return (f"kernels ms, measured/roofline: {', '.join(parts)}; kernels "
            f"{m['total_s'] * 1e3:.1f} of the step's {row['measured_step_s'] * 1e3:.1f}")


def summarize(rows: list[dict]) -> dict:
    """Median and worst |predicted/measured - 1|, and the share inside the band."""
    done = [r for r in rows if r.get("measured_step_s") and r.get("predicted_step_s")]
    if not done:
        return {"points": 0}
    errs = [r["predicted_step_s"] / r["measured_step_s"] - 1 for r in done]
    inside = [abs(e) <= r["band"] for e, r in zip(errs, done)]
    return {"points": len(done), "median_abs_error": statistics.median(map(abs, errs)),
            "max_abs_error": max(map(abs, errs)), "within_band": sum(inside) / len(done)}


def bare_step(model: str, batch: int, precision: str, device: str = "cuda"):
    """One bare training step of ``model`` on ``device`` (see the module), as a function."""
    import torch
    from torchvision import models as tvm

    if device == "cuda":
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True
    kwargs = {"aux_logits": True, "init_weights": False} if model == "inception_v3" else {}
    net = getattr(tvm, model)(num_classes=1000, **kwargs).to(device).train()
    side = side_of(model)
    x = torch.randn(batch, 3, side, side, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    if channels_last(model, precision):
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    ctx = (lambda: torch.autocast(device, dtype=torch.bfloat16)) if precision == "bf16" \
        else nullcontext

    def step():
        opt.zero_grad(set_to_none=True)
        with ctx():
            out = net(x)
            out = out.logits if hasattr(out, "logits") else out
            loss = loss_fn(out, y)
        loss.backward()
        opt.step()

    return step


def measure(model: str, batch: int, precision: str, warmup: int, steps: int,
            classes: bool = False) -> dict:
    """{"measured_step_s": median CUDA-event time of one bare training step (see the
    module), and with ``classes`` "measured_classes": one more step's kernel time per
    operation class (:func:`class_times`)}."""
    import torch

    step = bare_step(model, batch, precision)
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
    out = {"measured_step_s": statistics.median(times)}
    if classes:
        out["measured_classes"] = class_times(step, "cuda")
    return out


# autocast's casts (a dtype change): element-wise wherever they run. A copy_ under another
# operation (a convolution making its input contiguous) is that operation's.
_CASTS = {"to", "_to_copy"}


def _conv_shapes(name: str, shapes: list) -> tuple[list, list] | None:
    """(input shape, weight shape) of a convolution event's recorded input shapes."""
    at = 1 if "backward" in name else 0
    if len(shapes) > at + 1 and len(shapes[at]) >= 3 and len(shapes[at + 1]) == len(shapes[at]):
        return shapes[at], shapes[at + 1]
    return None


def classify(evt) -> tuple[str, bool]:
    """(scalelab operation class, a convolution of an input with <= 4 channels) of the ATen
    operation whose kernels ``evt`` (a profiler event) launched: the first of it and its
    callers that names a class (a convolution's groups from its recorded shapes); a cast
    (autocast's, inside the operation it feeds) is element-wise; the optimizer's step is
    ``optimizer``."""
    from scalelab.opclasses import op_class

    e = evt
    while e is not None:
        name = e.name.removeprefix("aten::")
        if name in _CASTS:
            return "elementwise", False
        if name.startswith("Optimizer.step") or name.startswith("_foreach_") or \
                name.startswith("_fused_sgd") or name.startswith("_fused_adam"):
            return "optimizer", False
        if "conv" in name and "convert" not in name:
            shapes = _conv_shapes(name, list(getattr(e, "input_shapes", None) or []))
            if shapes is not None:
                (x, w) = shapes
                groups = x[1] // w[1] if w[1] else 1
                return ("conv_grouped" if groups > 1 else "conv"), x[1] <= 4
        elif e.name.startswith("aten::"):
            cls = op_class(name)
            if cls != "elementwise":
                return cls, False
        e = e.cpu_parent
    return "elementwise", False


def _self_time_us(evt, device: str) -> float:
    """The kernel time ``evt`` launched itself (its callees' apart), on ``device``. The
    event list also holds the kernels as events of their own: they count through the
    operation that launched them, never twice."""
    from torch.autograd import DeviceType

    if getattr(evt, "device_type", DeviceType.CPU) != DeviceType.CPU:
        return 0.0
    if device == "cpu":
        return float(evt.self_cpu_time_total) if evt.name.startswith("aten::") else 0.0
    t = getattr(evt, "self_device_time_total", None)
    return float(t if t is not None else evt.self_cuda_time_total)


def class_times(step, device: str) -> dict:
    """One step of ``step`` under torch.profiler: the kernel time of each operation class
    (s), its convolutions of <= 4-channel inputs apart (``conv_small_input``), and the
    total. On a GPU: the device time of the kernels each ATen operation launched; on the
    CPU (to check the attribution): each ATen operation's own CPU time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts, record_shapes=True) as prof:
        step()
        if device == "cuda":
            torch.cuda.synchronize()
    by: dict[str, float] = {}
    small = 0.0
    for evt in prof.events():
        t = _self_time_us(evt, device) / 1e6
        if t <= 0:
            continue
        cls, tiny = classify(evt)
        by[cls] = by.get(cls, 0.0) + t
        small += t if tiny else 0.0
    return {"basis": "device kernels" if device == "cuda" else "cpu (aten ops)",
            "total_s": sum(by.values()), "classes_s": dict(sorted(by.items())),
            "conv_small_input_s": small}


def predicted_classes(model: str, batch: int, precision: str, device_name: str) -> dict:
    """The roofline's time of each operation class of the step on ``device_name``: the
    plan's device roofline (:func:`scalelab.hardware.estimate.device_roofline`) of that
    class's operations alone (a dense convolution is ``conv`` here, ``conv_nchw`` or not)."""
    from scalelab.hardware.estimate import device_roofline

    dev = _target(device_name)
    ops = _step_ops(model, batch, precision)
    return {cls: device_roofline(replace(ops, ops=tuple(o for o in ops.ops
                                                         if o.op_class == cls)),
                                 dev.name, precision).roofline_s
            for cls in sorted({o.op_class for o in ops.ops})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="32,128,256")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--class-batches", default="",
                    help="at these batches, profile one more step and set each operation "
                         "class's kernel time beside the roofline's (e.g. 128)")
    ap.add_argument("--out", default="bench-out/gpu_compute_check.json")
    args = ap.parse_args(argv)
    try:
        models = parse_list(args.models)
        batches = parse_batches(args.batches)
        class_batches = parse_batches(args.class_batches) if args.class_batches else []
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
                    profiled = batch in class_batches
                    row.update(measure(model, batch, precision, args.warmup, args.steps,
                                       classes=profiled))
                    if profiled:
                        row["predicted_classes"] = predicted_classes(model, batch, precision,
                                                                     name)
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
                if "measured_classes" in row:
                    print("  " + class_line(row))
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
