"""Compute time on the cluster's device: as measured, or estimated for another device.

When the cluster names the device the profile was measured on (or names none), T_C is the
measurement. Otherwise it is an estimate, marked as such everywhere it appears.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalelab import hardware
from scalelab.errors import UsageError
from scalelab.plan.cluster import Cluster
from scalelab.plan.inputs import PlanInput
from scalelab.plan.options import PlanOptions
from scalelab.theory import memory


def precision_of(algorithm: str | None) -> str:
    """The precision a computation configuration's name implies (fp32 when none)."""
    name = (algorithm or "").lower()
    for p in ("bf16", "fp16", "tf32"):
        if p in name:
            return p
    return "fp32"


def in_format(ops, inp: PlanInput, options: PlanOptions | None = None):
    """``ops`` in the memory format the target trains in: the plan's choice for the target
    (``options.target``) where it made one, else the measured configuration's
    (channels_last where its ``algorithm`` names it, else NCHW, PyTorch's default); under
    fp16/bf16 autocast NCHW convolutions take their own fitted factors
    (:func:`scalelab.hardware.curve.roofline_ops`)."""
    from dataclasses import replace

    from scalelab.algorithm_names import is_name, parse

    chosen = getattr(options, "target", None)
    if chosen is not None:
        return replace(ops, channels_last=chosen.channels_last)
    name = inp.algorithm or "default"
    return replace(ops, channels_last=is_name(name) and "channels_last" in parse(name))


def _format_note(ops, precision: str, chosen: bool = False) -> str:
    """Which memory format the convolutions were estimated in, where it matters (autocast)."""
    if precision not in ("fp16", "bf16"):
        return ""
    if chosen:
        return ", channels_last" if ops.channels_last else ", NCHW"
    return ", channels_last as measured" if ops.channels_last else \
        ", NCHW convolutions as measured (no channels_last in the configuration)"


def default_precision_note(device: hardware.Device) -> str:
    """What PyTorch's default ("fp32") means on ``device``: cuDNN runs convolutions in TF32
    where the device has TF32 units (``torch.backends.cudnn.allow_tf32`` defaults to True),
    while matrix products stay plain FP32 (``torch.backends.cuda.matmul.allow_tf32``
    defaults to False)."""
    if device.peak_flops("tf32") is not None:
        return "TF32 convolutions, FP32 matrix products"
    return "FP32 convolutions and matrix products"


def check_precision_units(device: hardware.Device, precision: str) -> None:
    """Refuse, in one line, a precision ``device`` has no units for (bf16 on a V100)."""
    if precision == "fp32" or device.peak_flops("fp32") is None:
        return
    if device.peak_flops(precision) is None:
        have = [p for p in hardware.PRECISIONS if device.peak_flops(p) is not None]
        raise UsageError(f"{device.name} has no {precision} units (it computes in "
                         f"{', '.join(have)}): choose one of those with --precision")


def target_precision(inp: PlanInput, cluster: Cluster, options: PlanOptions,
                     target: hardware.Device) -> tuple[str, str]:
    """(precision the target device computes in, why).

    The precisions are the user's: "fp32" is PyTorch's default (TF32 convolutions on devices
    with TF32 units, FP32 matrix products), "tf32" both in TF32, "bf16"/"fp16" autocast.
    The user's word first (``--precision``, then the cluster's ``precision``), refused when
    the target has no units for it; else, when the profile was measured on a GPU, its
    chosen configuration; else PyTorch's default, "fp32". What won on a CPU says nothing
    about how the user trains on GPUs, so a CPU profile's choice is not carried over.
    """
    if options.precision:
        check_precision_units(target, options.precision)
        return options.precision, "as asked with --precision"
    if cluster.precision:
        check_precision_units(target, cluster.precision)
        return cluster.precision, "the cluster file's precision"
    if options.target is not None:
        return options.target.precision, f"chosen for {target.name}"
    src = hardware.match_device(inp.device) if inp.device else None
    if src is not None and src.peak_flops("fp32") is not None and inp.algorithm:
        p = precision_of(inp.algorithm)
        if target.peak_flops(p) is not None:
            return p, f"the GPU profile's configuration {inp.algorithm}"
    return "fp32", f"PyTorch's default on {target.name}: {default_precision_note(target)}"


@dataclass(frozen=True)
class TargetCompute:
    compute_s: float
    estimate: bool
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    band: float = 0.0  # relative error band of an estimate: within compute_s x (1 +- band)
    precision: str | None = None  # the precision the estimate assumed
    floor_s: float = 0.0  # the target's step floor (kernels x launch latency)
    host_s: float = 0.0  # the target host's time to issue the step's operations (0: none)
    # what an estimate carried the measurement across: "device" (to another device) or
    # "precision" (to another precision on the device it was measured on)
    carried: str = "device"

    @property
    def host_bound(self) -> bool:
        """True when the host's time to issue the operations sets the step."""
        return self.host_s > 0 and self.host_s >= self.compute_s * (1 - 1e-12)


def source_precision(inp: PlanInput) -> str:
    """How the measurement was computed: its configuration's precision, else PyTorch's
    default ("fp32": a workload or profile without ``algorithm`` ran PyTorch's defaults)."""
    return precision_of(inp.algorithm)


def host_s_per_op(inp: PlanInput, target: hardware.Device) -> tuple[float, str]:
    """(the target host's seconds per issued operation, the assumption stated in the plan):
    :func:`carried_host_s_per_op` for ``inp``'s measurement."""
    return carried_host_s_per_op(target, inp.host_s_per_op, inp.source,
                                 inp.device or "the source", inp.host_loaded)


def carried_host_s_per_op(target: hardware.Device, measured: float | None = None,
                          source: str = "workload", measured_on: str = "the source",
                          loaded: str | None = None) -> tuple[float, str]:
    """(the target host's seconds per issued operation, the assumption stated in the plan).

    In this order:

    - a workload file's ``host_s_per_op`` (``source`` "workload"): the user's figure;
    - the one fitted to the target device's reference points where their host set some of
      their steps (:meth:`scalelab.hardware.fit.Fit.own_host_s_per_op`): the time that
      device's host took to issue a step's operations to it, kernel launches included.
      A profile's measurement (``source`` "profile",
      :func:`scalelab.profiler.host.measure_host_s_per_op`) times CPU operations on tiny
      tensors, which launch no kernel on a GPU, so it yields to this: on the H200 the fitted
      47.1 us per operation, against 27.6 us measured on a 2-core EPYC, puts the three
      host-bound bf16 rows at batch 128 within 3.2-9.6%, where the measured time left them
      32-43% fast;
    - a profile's measurement, unless it was measured on a loaded machine (``loaded`` says
      how loaded: :mod:`scalelab.profiler.host`), where a busy core inflates it (69.5 us
      measured while other work kept both cores here busy, 28 us quiet);
    - the packaged measurement (``reference.toml`` [host]).

    Carried to the target's host unchanged, which is an assumption: a faster host issues
    faster.
    """
    from scalelab.hardware.packaged import fit_and_bands

    where_measured = f"as measured where the step was ({measured_on})"
    if measured and source != "profile":
        return measured, _host_line(target, measured, where_measured)
    if measured and loaded:
        h, where = fit_and_bands()[0].host_s_per_op(target.name)
        return h, _host_line(target, h, f"{where}, not the profile's {measured * 1e6:.3g} us: "
                             f"measured on a loaded machine ({loaded})")
    f = fit_and_bands()[0]
    own = f.own_host_s_per_op(target.name)
    if own is not None:
        h, where = own
        if measured:
            where += (f", not the profile's {measured * 1e6:.3g} us (measured on "
                      f"{measured_on} by timing CPU operations, which launch no GPU kernel)")
        return h, _host_line(target, h, where)
    if measured:
        return measured, _host_line(target, measured, where_measured)
    h, where = f.host_s_per_op(target.name)
    return h, _host_line(target, h, where)


def _host_line(target: hardware.Device, h: float, where: str) -> str:
    return (f"assumption: {target.name}'s host issues one operation of the step in "
            f"{h * 1e6:.3g} us, {where}; the step is at least its operations x that")


def _host_warning(target: hardware.Device, est) -> tuple[str, ...]:
    if est.bound != "host":
        return ()
    return (f"the host sets the step on {target.name}: issuing the operations takes "
            f"{est.host_s * 1e3:.3g} ms, the device {est.device_s * 1e3:.3g} ms; a larger "
            "batch, CUDA graphs or torch.compile leave the device less idle",)


def _roofline_compute(inp: PlanInput, step_s: float, batch_size: int,
                      target: hardware.Device, precision: str, why: str,
                      options: PlanOptions | None = None, source_batch: int | None = None
                      ) -> TargetCompute | None:
    """The per-operation roofline estimate (:mod:`scalelab.hardware.estimate`), or None when
    the model's operations cannot be counted (no model named, a model meta tensors cannot
    run, batch 1) or the target's peaks are unknown."""
    from scalelab.hardware.estimate import estimate_step
    from scalelab.hardware.packaged import fit_and_bands
    from scalelab.opcache import step_ops
    from scalelab.workload import WorkloadSpec

    if not inp.model or batch_size < 2 or target.peak_flops("fp32") is None \
            or target.memory_bandwidth_Bps is None:
        return None
    spec = WorkloadSpec(model=inp.model, input_shape=inp.input_shape,
                        num_classes=inp.num_classes)
    try:
        ops = in_format(step_ops(spec, batch_size), inp, options)
        src_ops = (in_format(step_ops(spec, source_batch), inp)
                   if source_batch not in (None, batch_size) and source_batch >= 2 else None)
    except ValueError:
        return None
    mode = precision
    f, b = fit_and_bands()
    host_s, host_note = host_s_per_op(inp, target)
    est = estimate_step(ops, target.name, mode, source_device=inp.device,
                        source_step_s=step_s, source_ops=src_ops,
                        source_precision=source_precision(inp), f=f, b=b,
                        host_s_per_op=host_s)
    fmt = _format_note(ops, mode, getattr(options, "target", None) is not None)
    how = f"compute estimated for {target.name} ({mode}{fmt}: {why}): {est.how}"
    warnings = _host_warning(target, est) + (() if est.source_device and "not used" not in
                                             est.how else (
        f"assumption: {inp.device or 'the source'} is not a GPU in the catalog, so "
        f"{target.name}'s step is the roofline with fractions fitted to published "
        f"throughputs alone (+-{est.band:.0%}); profile on a GPU for a tighter estimate",))
    return TargetCompute(est.step_s, True, (how, host_note), warnings, est.band, mode,
                         est.floor_s, est.host_s)


def _same_device(inp: PlanInput, step_s: float, batch_size: int, cluster: Cluster,
                 options: PlanOptions, target: hardware.Device) -> TargetCompute:
    """The measurement itself, or, when another precision is asked for on the device it was
    measured on, the measurement carried by the ratio of the device's rooflines at the two
    precisions: ``T_p = T_measured x R(device, p) / R(device, p_measured)``."""
    measured_p = source_precision(inp)
    asked = options.precision or cluster.precision
    if not asked or asked == measured_p:
        return TargetCompute(step_s, False, (), (), precision=measured_p)
    if target.peak_flops("fp32") is None or target.memory_bandwidth_Bps is None:
        raise UsageError(
            f"--precision {asked} on {target.name}: its peaks are unknown, so the step "
            f"measured in {measured_p} cannot be carried to {asked}; drop --precision, or "
            "profile in that precision there (scalelab profile --algorithms auto times the "
            "configurations the device runs)")
    precision, why = target_precision(inp, cluster, options, target)
    from scalelab.hardware.estimate import estimate_step
    from scalelab.hardware.packaged import fit_and_bands
    from scalelab.opcache import step_ops
    from scalelab.workload import WorkloadSpec

    ops = None
    if inp.model and batch_size >= 2:
        try:
            ops = in_format(step_ops(WorkloadSpec(model=inp.model, input_shape=inp.input_shape,
                                                  num_classes=inp.num_classes), batch_size), inp)
        except ValueError:
            ops = None
    if ops is not None:
        f, b = fit_and_bands()
        host_s, host_note = host_s_per_op(inp, target)
        est = estimate_step(ops, target.name, precision, source_device=target.name,
                            source_step_s=step_s, source_precision=measured_p, f=f, b=b,
                            host_s_per_op=host_s)
        how = (f"compute carried from {measured_p} (measured) to {precision} ({why}) on "
               f"{target.name} by the ratio of its rooflines: {est.how}")
        return TargetCompute(est.step_s, True, (how, host_note), _host_warning(target, est),
                             est.band, precision, est.floor_s, est.host_s, carried="precision")
    peak_s, peak_t = _conv_peak(target, measured_p), _conv_peak(target, precision)
    t = step_s * peak_s / peak_t
    how = (f"compute carried from {measured_p} (measured) to {precision} ({why}) on "
           f"{target.name} by the ratio of its peaks: {step_s:.4g} s x {peak_s / 1e12:g}/"
           f"{peak_t / 1e12:g} TFLOPS = {t:.4g} s")
    warning = (f"assumption: the workload names no model whose operations can be counted, so "
               f"the {measured_p} step on {target.name} is carried to {precision} by the "
               "ratio of peak FLOP/s, as if every operation were bound by its arithmetic")
    return TargetCompute(t, True, (how,), (warning,), 0.0, precision, 0.0, carried="precision")


def _conv_peak(device: hardware.Device, precision: str) -> float | None:
    """The peak FLOP/s a convolution runs at on ``device`` in the user's ``precision``
    (PyTorch's default "fp32": TF32 where the device has it), None when unknown."""
    if precision == "fp32" and device.peak_flops("tf32") is not None:
        return device.peak_flops("tf32")
    return device.peak_flops(precision) or device.peak_flops("fp32")


def target_compute(inp: PlanInput, step_s: float, batch_size: int, cluster: Cluster,
                   options: PlanOptions, source_batch: int | None = None) -> TargetCompute:
    """Compute time on the cluster's device: as measured, or estimated for it.

    Estimated, when the model's operations can be counted: a roofline per operation on the
    target, with the achievable fractions fitted to published training throughputs, anchored
    to the measured step when the source is a catalog GPU (:func:`scalelab.hardware.estimate.
    estimate_step`), with its error band. Otherwise (a workload without a model) scaled by
    peak FLOPS: ``T_target = FLOPs / (peak_target * e)``, with ``e = FLOPs / (T_source *
    peak_source)`` the efficiency measured on the source, or the assumed
    ``options.default_mfu`` when the source's peak is unknown (a CPU). ``source_batch``:
    the batch ``step_s`` was measured at, where it is not ``batch_size`` (the plan chose
    another batch for the target, :mod:`scalelab.plan.target`).
    """
    if cluster.device is None:
        return TargetCompute(step_s, False, (), ())
    target = hardware.device(cluster.device)
    src = hardware.match_device(inp.device) if inp.device else target
    if src is not None and src.name == target.name:
        return _same_device(inp, step_s, batch_size, cluster, options, target)
    precision, why = target_precision(inp, cluster, options, target)
    roof = _roofline_compute(inp, step_s, batch_size, target, precision, why, options,
                             source_batch)
    if roof is not None:
        return roof
    if source_batch and source_batch != batch_size:  # per-sample time carried to the batch
        step_s = step_s * batch_size / source_batch
    warnings: list[str] = []
    peak_t = _conv_peak(target, precision)
    if peak_t is None:
        raise UsageError(f"the peak FLOPS of {target.name} are unknown: cannot scale a "
                         f"measurement from {inp.device} to it")
    peak_s = _conv_peak(src, source_precision(inp)) if src is not None else None
    per_sample = inp.flops_per_sample
    if not per_sample and peak_s is None and inp.model:
        from scalelab.opcache import describe
        from scalelab.workload import WorkloadSpec

        spec = WorkloadSpec(model=inp.model, input_shape=inp.input_shape,
                            num_classes=inp.num_classes)
        per_sample = describe(spec, flops=True).flops_per_sample
    flops = per_sample * batch_size if per_sample else None
    src_name = src.name if src is not None else repr(inp.device)
    if peak_s is not None:
        e = flops / (step_s * peak_s) if flops else None
        t = step_s * peak_s / peak_t
        how = (f"compute scaled from {src_name} to {target.name}: T = FLOPs/(peak x e) = "
               f"{step_s:.4g} s x {peak_s / 1e12:g}/{peak_t / 1e12:g} TFLOPS ({precision}) "
               f"= {t:.4g} s" + (f" (e = {e:.2f} measured on {src_name})" if e else ""))
        return TargetCompute(t, True, (how,), tuple(warnings))
    if not flops:
        raise UsageError(f"cannot scale a step measured on {inp.device} to {target.name}: "
                         "its peak is unknown and the workload has no FLOPs (name the model)")
    e = options.default_mfu
    t = flops / (peak_t * e)
    how = (f"compute estimated for {target.name}: T = FLOPs/(peak x e) = {flops:.4g}/"
           f"({peak_t / 1e12:g}e12 x {e:g}) = {t:.4g} s")
    warnings.append(
        f"assumption: {src_name} has no known peak, so the model's efficiency on "
        f"{target.name} is taken as {e:g} of its {precision} peak (not measured); "
        "profile on the target device for a measured figure")
    return TargetCompute(t, True, (how,), tuple(warnings))


def memory_check(inp: PlanInput, batch_size: int, cluster: Cluster) -> str | None:
    """A warning when the profile's memory fit says the batch won't fit the target device.

    Only for a profile measured on a GPU (a CPU's resident memory includes the framework and
    says little about device memory). Fit: memory = intercept + per_sample * b; the largest
    batch that fits is :func:`scalelab.theory.memory.largest_batch`.

    First, whatever the profile's device: the model's memory by component against the
    target device (:func:`scalelab.plan.layouts.target_memory_note`); this fit only where
    those cannot be known.
    """
    from scalelab.plan.layouts import target_memory_note

    judged = target_memory_note(inp, batch_size, cluster)
    if judged is not None:
        return judged or None
    if cluster.device is None or inp.fit_memory_bytes is None:
        return None
    src = hardware.match_device(inp.device)
    target = hardware.device(cluster.device)
    if src is None or src.memory_bytes is None or target.memory_bytes is None \
            or src.name == target.name:
        return None
    intercept, per_sample = inp.fit_memory_bytes
    need = intercept + per_sample * batch_size
    budget = memory.usable_bytes(target.memory_bytes)
    if need <= budget or per_sample <= 0:
        return None
    largest = memory.largest_batch(target.memory_bytes, intercept, per_sample)
    return (f"batch {batch_size} needs about {need / 2**30:.1f} GiB by the profile's memory fit, "
            f"more than {memory.MEMORY_MARGIN:.0%} of the {target.name}'s "
            f"{target.memory_bytes / 2**30:.0f} GiB: "
            + (f"use batch <= {largest}" if largest >= 1 else "the model does not fit"))

