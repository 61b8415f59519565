"""The batch and the computation configuration chosen for the device the user trains on.

The paper's procedure (the largest batch that fits, the fastest configuration that fits),
run for the target device instead of the one that profiled: a CPU profile contributes the
model's structure (its operations, parameters and activations), a workload file measured on
another GPU its measured step as the estimate's anchor, and the target's compute model
(:func:`scalelab.hardware.estimate.estimate_step`, the host's time to issue the operations
included) gives the step at every batch and precision.

1. Memory: the largest batch plain data parallelism holds on the target with the margin
   (:func:`scalelab.plan.layouts.layout_memory`, activations at their fp32 size: an upper
   bound under autocast). Batches above ``LARGE_BATCH / devices`` are not weighed, so the
   cluster's global batch stays where training converges without learning-rate scaling.
2. Throughput against batch, ``b / T(b)``, for every power of two up to that batch and the
   batch itself.
3. The batch: the smallest whose throughput is within the compute model's band of the best,
   even when the host is as slow as the top of its band (:func:`host_band`). A step the
   host sets at the middle of that band but not at its top is why a larger batch wins, and
   the reason says so.
4. The precision: PyTorch's default ("fp32") against bf16 autocast where the target has
   bf16 units, else fp16 autocast with loss scaling where it has fp16 units (a V100), in
   channels_last for convolutional networks; each at its own batch. The faster wins; within
   the band of each other (the model cannot rank them) the one with the shorter device time,
   which stays faster as the host issues faster (CUDA graphs, ``torch.compile``).

``--precision`` (or the cluster's ``precision``) fixes the precision, ``--batch-size`` the
batch; a profile measured on the target device itself is its own answer (the plan keeps its
measurement) and nothing here runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from scalelab import hardware
from scalelab.plan.options import LARGE_BATCH

#: the run configurations that compute in each precision the plan weighs
_RUN_NAME = {"fp32": "default", "bf16": "bf16_autocast", "fp16": "fp16_autocast"}
_CANDIDATES = tuple(2 ** k for k in range(1, 13))  # 2 .. 4096 (batch norm needs 2)


@dataclass(frozen=True)
class HostTime:
    """The target host's time to issue one operation: the value used and its band."""

    s_per_op: float
    low_s: float
    high_s: float
    line: str  # the assumption as the plan states it (value and source)
    sources: tuple[tuple[str, float], ...] = ()  # the figures the band spans

    def text(self) -> str:
        band = ", ".join(f"{where} {s * 1e6:.3g} us" for where, s in self.sources)
        return (f"host time per operation {self.s_per_op * 1e6:.3g} us, band "
                f"{self.low_s * 1e6:.3g}-{self.high_s * 1e6:.3g} us ({band})")


@dataclass(frozen=True)
class BatchPoint:
    """One batch of the throughput curve at one precision on the target."""

    batch_size: int
    step_s: float
    samples_per_s: float
    device_s: float  # the device's time alone
    host_s: float  # the host's time to issue the operations at the used host time
    samples_per_s_slow_host: float  # with the host at the top of its band

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PrecisionCurve:
    """A precision's curve against batch, and the batch it leads to."""

    precision: str
    channels_last: bool
    band: float  # the compute model's relative band at this precision
    points: tuple[BatchPoint, ...]
    chosen: BatchPoint
    best: BatchPoint
    host_moved: bool  # the host's band moved the batch up (at its middle a smaller one did)

    @property
    def algorithm(self) -> str:
        name = _RUN_NAME[self.precision]
        if self.channels_last:
            name = "channels_last" if name == "default" else f"{name}+channels_last"
        return name

    def to_dict(self) -> dict[str, Any]:
        return {"precision": self.precision, "channels_last": self.channels_last,
                "algorithm": self.algorithm, "band": self.band,
                "batch_size": self.chosen.batch_size,
                "samples_per_s": self.chosen.samples_per_s,
                "best_batch_size": self.best.batch_size,
                "best_samples_per_s": self.best.samples_per_s, "host_moved": self.host_moved,
                "curve": [p.to_dict() for p in self.points]}


@dataclass(frozen=True)
class TargetChoice:
    """What the plan chose for the target device, with the figures behind it."""

    device: str
    batch_size: int
    precision: str
    channels_last: bool
    algorithm: str  # the run configuration (``--algorithm``), "default" for PyTorch's
    curves: tuple[PrecisionCurve, ...]
    largest_batch: int | None  # plain data parallelism's largest on the target (None: unknown)
    batch_cap: int  # LARGE_BATCH / devices
    host: HostTime
    batch_fixed: bool  # --batch-size fixed it
    precision_fixed: str | None  # why, when --precision or the cluster fixed it
    reasons: tuple[str, ...]

    @property
    def curve(self) -> PrecisionCurve:
        return next(c for c in self.curves if c.precision == self.precision)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "batch_size": self.batch_size,
                "precision": self.precision, "channels_last": self.channels_last,
                "algorithm": self.algorithm, "largest_batch": self.largest_batch,
                "batch_cap": self.batch_cap, "host_s_per_op": self.host.s_per_op,
                "host_s_per_op_low": self.host.low_s, "host_s_per_op_high": self.host.high_s,
                "host_source": self.host.line, "batch_fixed": self.batch_fixed,
                "precision_fixed": self.precision_fixed, "reasons": list(self.reasons),
                "curves": [c.to_dict() for c in self.curves]}


def host_band(target: hardware.Device, used: float, line: str) -> HostTime:
    """The band of the target host's time per operation: from the lowest to the highest of
    the value used, the packaged measurement (a quiet CPU's dispatch) and every time fitted
    to a GPU's own host-bound reference points (a GPU node's host issuing real kernels).
    A GPU node's host is not the machine that profiled, so its time is known only to this
    range."""
    from scalelab.hardware.packaged import fit_and_bands
    from scalelab.hardware.reference import reference

    f = fit_and_bands()[0]
    sources = [("packaged (quiet CPU)", reference().host_s_per_op)]
    seen = set()
    for (name, _cls), _v in sorted(f.devices.items()):
        own = f.own_host_s_per_op(name) if name not in seen else None
        seen.add(name)
        if own is not None:
            sources.append((f"fitted to {name}", own[0]))
    values = [used] + [s for _, s in sources]
    return HostTime(used, min(values), max(values), line, tuple(sources))


def _weighed(target: hardware.Device, asked: str | None, ps: bool = False
             ) -> tuple[str, ...]:
    """The precisions weighed on ``target``: the one asked for, else fp32 and the half
    precision its units offer (bf16 first, fp16 where it has no bf16; not fp16 under
    parameter servers, ``ps``: its loss scaling needs the optimizer beside the gradients,
    which scalelab run trains under all-reduce only)."""
    if asked:
        return (asked,)
    for half in ("bf16", "fp16"):
        if target.peak_flops(half) is not None:
            return ("fp32", half) if not (half == "fp16" and ps) else ("fp32",)
    return ("fp32",)


def is_convolutional(ops) -> bool:
    """Whether the step runs convolutions (channels_last is weighed for those only)."""
    return any(o.name.startswith("convolution") for o in ops.ops)


def _candidates(limit: int) -> list[int]:
    got = [b for b in _CANDIDATES if b <= limit]
    return got + ([limit] if limit not in got else [])


def _alone(b: int, step_s: float) -> float:
    return b / step_s


def _point(est, est_slow, b: int, rate) -> BatchPoint:
    return BatchPoint(b, est.step_s, rate(b, est), est.device_s, est.host_s,
                      rate(b, est_slow))


def precision_curve(estimate, precision: str, channels_last: bool, batches: list[int],
                    host: HostTime, band: float, rate=None) -> PrecisionCurve:
    """The curve of ``precision`` over ``batches``; ``estimate(b, precision, cl, h)`` is the
    target's :class:`~scalelab.hardware.estimate.Estimate` at batch b, host time h;
    ``rate(b, estimate)`` a device's samples/s with it (default b / step: one device
    alone; the plan passes the rate on the whole cluster, its exchange included)."""
    rate = rate or (lambda b, est: _alone(b, est.step_s))
    pts = tuple(_point(estimate(b, precision, channels_last, host.s_per_op),
                       estimate(b, precision, channels_last, host.high_s), b, rate)
                for b in batches)
    best = max(pts, key=lambda p: p.samples_per_s)
    goal = best.samples_per_s / (1 + band)
    powers = [p for p in pts if p.batch_size in _CANDIDATES] or list(pts)
    chosen = next((p for p in powers if p.samples_per_s_slow_host >= goal), best)
    middle = next((p for p in powers if p.samples_per_s >= goal), best)
    return PrecisionCurve(precision, channels_last, band, pts, chosen, best,
                          middle.batch_size < chosen.batch_size)


def pick_precision(curves: list[PrecisionCurve]) -> tuple[PrecisionCurve, str]:
    """(the curve chosen, why): the faster at its batch beyond the band; within it, the
    shorter device time."""
    if len(curves) == 1:
        return curves[0], ""
    fp32, half = curves[0], curves[1]
    a, b = fp32.chosen, half.chosen
    ratio = b.samples_per_s / a.samples_per_s
    band = max(fp32.band, half.band)
    figures = (f"{half.precision} {b.samples_per_s:,.0f} samples/s at batch {b.batch_size} "
               f"against fp32 {a.samples_per_s:,.0f} at batch {a.batch_size} "
               f"({ratio:.2f}x)")
    if ratio > 1 + band:
        return half, f"{figures}: faster beyond the model's band (+-{band:.0%})"
    if ratio < 1 / (1 + band):
        return fp32, f"{figures}: fp32 faster beyond the model's band (+-{band:.0%})"
    dev_a, dev_b = a.device_s / a.batch_size, b.device_s / b.batch_size
    win = half if dev_b < dev_a else fp32
    return win, (f"{figures}: within the model's band (+-{band:.0%}) of each other; "
                 f"{win.precision} has the shorter device time ({dev_b * 1e6:.3g} against "
                 f"{dev_a * 1e6:.3g} us per sample), which holds as the host issues faster "
                 "(CUDA graphs, torch.compile)")


def batch_limit(sizes, gpus: int, device: hardware.Device) -> int | None:
    """Plain data parallelism's largest batch on ``device`` (None: sizes or memory unknown)."""
    from scalelab.plan.layouts import layout_memory

    if sizes is None or not device.memory_bytes or sizes.per_sample_bytes <= 0:
        return None
    return layout_memory(sizes, gpus, "ddp", 1).largest_batch(float(device.memory_bytes))


def cap_for(gpus: int) -> int:
    """The largest per-device batch that keeps ``gpus`` devices' global batch within
    :data:`LARGE_BATCH`."""
    return max(1, LARGE_BATCH // max(1, gpus))


def applies(inp, cluster) -> hardware.Device | None:
    """The target device when the plan chooses for it: a catalog GPU with known peaks that
    is not the device the measurement came from, for a model whose operations are known."""
    if cluster.device is None or not inp.model or not inp.device:
        return None  # a measurement that names no device was made on the cluster's
    target = hardware.device(cluster.device)
    if target.peak_flops("fp32") is None or target.memory_bandwidth_Bps is None:
        return None
    src = hardware.match_device(inp.device) if inp.device else None
    if src is not None and src.name == target.name:
        return None  # measured on the target: the measurement decides
    return target


def _estimator(inp, target: hardware.Device):
    """``estimate(b, precision, channels_last, host_s_per_op)`` on ``target``, anchored to
    the measured step where it came from a catalog GPU (at the batch it was measured at)."""
    from scalelab.hardware.estimate import estimate_step
    from scalelab.hardware.packaged import fit_and_bands
    from scalelab.opcache import step_ops
    from scalelab.plan.compute import in_format, source_precision
    from scalelab.workload import WorkloadSpec

    f, bands = fit_and_bands()
    spec = WorkloadSpec(model=inp.model, input_shape=inp.input_shape,
                        num_classes=inp.num_classes)
    src_ops = in_format(step_ops(spec, inp.batch_size), inp) if inp.batch_size >= 2 else None
    cache: dict = {}

    def estimate(b: int, precision: str, channels_last: bool, h: float):
        key = (b, precision, channels_last, h)
        if key not in cache:
            ops = dataclasses.replace(step_ops(spec, b), channels_last=channels_last)
            cache[key] = estimate_step(
                ops, target.name, precision, source_device=inp.device,
                source_step_s=inp.step_s if src_ops is not None else None, source_ops=src_ops,
                source_precision=source_precision(inp), f=f, b=bands, host_s_per_op=h)
        return cache[key]

    return estimate, (lambda p: bands.band(target.name, p))


def cluster_rate(inp, cluster, options, gpus: int):
    """``rate(b, estimate)``: one device's samples/s when ``gpus`` devices train at batch b
    with that step, the exchange included (the fastest architecture the plan weighs, at the
    full count: :func:`scalelab.plan.sweep.sweep_architecture`), so a slow network asks
    for a larger batch as the paper's lemma does. Input time is left out."""
    from scalelab.plan.step import ARCHITECTURES, ModelParams, StepWorkload
    from scalelab.plan.sweep import sweep_architecture

    params = options.params or ModelParams()
    if cluster.overlap is not None:
        params = dataclasses.replace(params, overlap=cluster.overlap)
    if cluster.latency_s is not None:
        params = dataclasses.replace(params, latency_s=cluster.latency_s)
    archs = options.architectures or ((cluster.architecture,) if cluster.architecture
                                      else ARCHITECTURES)
    k = cluster.accumulation_steps
    grads = cluster.grad_bytes(inp.param_bytes)
    tensors = tuple(int(cluster.grad_bytes(t)) for t in inp.tensor_bytes)
    derive = cluster.overlap is None and options.params is None
    if gpus < 2:
        return lambda b, est: _alone(b, est.step_s)

    def rate(b: int, est) -> float:
        backward = None if inp.backward_fraction is None else inp.backward_fraction * est.step_s
        work = StepWorkload(grads, k * est.step_s, inp.io_s * k, tensors, backward_s=backward)
        return max(sweep_architecture(work, cluster, params, a, [gpus], b * k,
                                      target_efficiency=options.target_efficiency,
                                      derive_overlap=derive)[0].samples_per_s
                   for a in archs) / gpus

    return rate


def choose(inp, cluster, options) -> TargetChoice | None:
    """The batch and the precision for the cluster's device (None where the plan keeps the
    measurement's: no target, the target measured, a model whose operations are unknown)."""
    from scalelab.opcache import step_ops
    from scalelab.plan.compute import check_precision_units, host_s_per_op, in_format
    from scalelab.plan.layouts import sizes_for
    from scalelab.workload import WorkloadSpec

    target = applies(inp, cluster)
    if target is None:
        return None
    asked = options.precision or cluster.precision
    if asked:
        check_precision_units(target, asked)
    try:
        ops = step_ops(WorkloadSpec(model=inp.model, input_shape=inp.input_shape,
                                    num_classes=inp.num_classes), 2)
    except ValueError:
        return None  # a model meta tensors cannot run: the plan's older path says so
    gpus = options.max_gpus or cluster.gpus
    largest = batch_limit(sizes_for(inp), cluster.gpus, target)
    cap = cap_for(gpus)
    limit = options.batch_size or max(2, min(largest or cap, cap))
    batches = [options.batch_size] if options.batch_size else _candidates(limit)
    used, line = host_s_per_op(inp, target)
    host = host_band(target, used, line)
    estimate, band_of = _estimator(inp, target)
    conv = is_convolutional(ops)
    measured_cl = in_format(ops, inp).channels_last  # a forced precision keeps the format
    rate = cluster_rate(inp, cluster, options, gpus)
    curves = [precision_curve(estimate, p, measured_cl if asked else
                              (conv and p in ("bf16", "fp16")), batches, host, band_of(p),
                              rate)
              for p in _weighed(target, asked, _only_ps(cluster, options))]
    if asked:
        win, why = curves[0], ("as asked with --precision" if options.precision
                               else "the cluster file's precision")
    elif len(curves) == 1:
        win, why = curves[0], (
            "the only precision weighed: fp16's loss scaling needs the optimizer beside the "
            "gradients, which parameter servers do not have" if target.peak_flops("fp16")
            else f"the {target.name} has no bf16 or fp16 units")
    else:
        win, why = pick_precision(curves)
    reasons = _reasons(inp, target, win, why, largest, cap, gpus, host, bool(options.batch_size))
    return TargetChoice(target.name, win.chosen.batch_size, win.precision, win.channels_last,
                        win.algorithm, tuple(curves), largest, cap, host,
                        bool(options.batch_size), why if asked else None, reasons)


def _only_ps(cluster, options) -> bool:
    """Whether the plan trains under parameter servers only (the cluster or the options
    name ps alone)."""
    archs = options.architectures or ((cluster.architecture,) if cluster.architecture
                                      else ())
    return bool(archs) and set(archs) == {"ps"}


def _reasons(inp, target, win: PrecisionCurve, why: str, largest: int | None, cap: int,
             gpus: int, host: HostTime, fixed: bool) -> tuple[str, ...]:
    c, best = win.chosen, win.best
    on = f" on {gpus} with the exchange" if gpus > 1 else ""
    src = inp.device or "an unnamed device"
    where = (f"the profile measured on {src} gives the model's structure (operations, "
             f"parameters, activations); its times are not used for {target.name}"
             if hardware.match_device(src) is None or
             hardware.match_device(src).peak_flops("fp32") is None
             else f"the step measured on {src} at batch {inp.batch_size} anchors "
                  f"{target.name}'s estimate (the ratio of their rooflines); its batch was "
                  "where it was measured, not a choice")
    fmt = ("channels_last" if win.channels_last else "NCHW") if win.precision != "fp32" \
        else ("channels_last" if win.channels_last else "")
    label = f"{win.precision}" + (f", {fmt}" if fmt else "")
    if fixed:
        batch = (f"batch_size {c.batch_size}: as asked; on {target.name} ({label}) "
                 f"{c.samples_per_s:,.0f} samples/s per device, step {c.step_s * 1e3:.3g} ms")
    else:
        mem = (f"plain data parallelism holds at most batch {largest:,} per device with the "
               "margin (activations at their fp32 size)" if largest is not None
               else "the target's memory for this model is unknown")
        capped = (f"; batches above {cap:,} not weighed ({gpus} devices x {cap:,} = "
                  f"{gpus * cap:,}, the global batch past which convergence needs "
                  "learning-rate scaling and warm-up)" if largest is None or cap < largest
                  else "")
        batch = (f"batch_size {c.batch_size}: chosen for {target.name} ({label}): "
                 f"{c.samples_per_s:,.0f} samples/s per device{on}, within the model's band "
                 f"(+-{win.band:.0%}) of the best that fits, {best.samples_per_s:,.0f} at batch "
                 f"{best.batch_size} (step {c.step_s * 1e3:.3g} ms against "
                 f"{best.step_s * 1e3:.3g} ms); {mem}{capped}")
        if win.host_moved:
            below = next(p for p in win.points if p.batch_size == c.batch_size // 2) \
                if c.batch_size // 2 in [p.batch_size for p in win.points] else None
            if below is not None:
                batch += (f"; a batch chosen because of the host floor: batch "
                          f"{below.batch_size} gives {below.samples_per_s:,.0f} samples/s at "
                          f"{host.s_per_op * 1e6:.3g} us per operation but "
                          f"{below.samples_per_s_slow_host:,.0f} at the band's "
                          f"{host.high_s * 1e6:.3g} us")
    algo = (f"algorithm {win.algorithm}: {win.precision}"
            + (" autocast" if win.precision in ("bf16", "fp16") else "")
            + (" with loss scaling" if win.precision == "fp16" else "")
            + (" in channels_last" if win.channels_last else "")
            + f" on {target.name}: {why}")
    return (where, batch, algo, host.text())
