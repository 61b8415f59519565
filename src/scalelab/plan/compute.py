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


def target_precision(inp: PlanInput, cluster: Cluster, options: PlanOptions,
                     target: hardware.Device) -> tuple[str, str]:
    """(precision the target device computes in, why).

    The user's word first (``--precision``, then the cluster's ``precision``); else, when the
    profile was measured on a GPU, its chosen configuration; else PyTorch's default on the
    target: TF32 for convolutions on devices with TF32 units (Ampere and later: PyTorch's
    ``torch.backends.cudnn.allow_tf32`` defaults to True), FP32 elsewhere. What won on a
    CPU says nothing about how the user trains on GPUs, so a CPU profile's choice is not
    carried over.
    """
    if options.precision:
        return options.precision, "as asked (--precision)"
    if cluster.precision:
        return cluster.precision, "the cluster file's precision"
    src = hardware.match_device(inp.device) if inp.device else None
    if src is not None and src.peak_flops("fp32") is not None and inp.algorithm:
        return precision_of(inp.algorithm), f"the GPU profile's configuration {inp.algorithm}"
    if target.peak_flops("tf32") is not None:
        return "tf32", f"PyTorch's default on {target.name} (TF32 convolutions)"
    return "fp32", f"PyTorch's default on {target.name} (FP32)"


@dataclass(frozen=True)
class TargetCompute:
    compute_s: float
    estimate: bool
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    band: float = 0.0  # relative error band of an estimate: within compute_s x (1 +- band)
    precision: str | None = None  # the precision the estimate assumed
    floor_s: float = 0.0  # the target's step floor (kernels x launch latency)


def _roofline_mode(precision: str, why: str) -> str:
    """The estimate's precision mode: PyTorch's default (TF32 convolutions, FP32 matrix
    products) is the roofline's "fp32" mode; a named precision is itself."""
    return "fp32" if why.startswith("PyTorch's default") else precision


def _source_precision(inp: PlanInput, mode: str) -> str:
    """How the source GPU computed: its profile's configuration, else the same mode."""
    return precision_of(inp.algorithm) if inp.algorithm else mode


def _roofline_compute(inp: PlanInput, step_s: float, batch_size: int,
                      target: hardware.Device, precision: str, why: str
                      ) -> TargetCompute | None:
    """The per-operation roofline estimate (:mod:`scalelab.hardware.estimate`), or None when
    the model's operations cannot be counted (no model named, a model meta tensors cannot
    run, batch 1) or the target's peaks are unknown."""
    from scalelab.hardware.estimate import estimate_step
    from scalelab.opcount import step_ops
    from scalelab.workload import WorkloadSpec

    if not inp.model or batch_size < 2 or target.peak_flops("fp32") is None \
            or target.memory_bandwidth_Bps is None:
        return None
    try:
        ops = step_ops(WorkloadSpec(model=inp.model, input_shape=inp.input_shape,
                                    num_classes=inp.num_classes), batch_size)
    except ValueError:
        return None
    mode = _roofline_mode(precision, why)
    est = estimate_step(ops, target.name, mode, source_device=inp.device,
                        source_step_s=step_s, source_precision=_source_precision(inp, mode))
    how = f"compute estimated for {target.name} ({mode}: {why}): {est.how}"
    warnings = () if est.source_device and "not used" not in est.how else (
        f"assumption: {inp.device or 'the source'} is not a GPU in the catalog, so "
        f"{target.name}'s step is the roofline with fractions fitted to published "
        f"throughputs alone (+-{est.band:.0%}); profile on a GPU for a tighter estimate",)
    return TargetCompute(est.step_s, True, (how,), warnings, est.band, mode, est.floor_s)


def target_compute(inp: PlanInput, step_s: float, batch_size: int, cluster: Cluster,
                   options: PlanOptions) -> TargetCompute:
    """Compute time on the cluster's device: as measured, or estimated for it.

    Estimated, when the model's operations can be counted: a roofline per operation on the
    target, with the achievable fractions fitted to published training throughputs, anchored
    to the measured step when the source is a catalog GPU (:func:`scalelab.hardware.estimate.
    estimate_step`), with its error band. Otherwise (a workload without a model) scaled by
    peak FLOPS: ``T_target = FLOPs / (peak_target * e)``, with ``e = FLOPs / (T_source *
    peak_source)`` the efficiency measured on the source, or the assumed
    ``options.default_mfu`` when the source's peak is unknown (a CPU).
    """
    if cluster.device is None:
        return TargetCompute(step_s, False, (), ())
    target = hardware.device(cluster.device)
    src = hardware.match_device(inp.device) if inp.device else target
    if src is not None and src.name == target.name:
        return TargetCompute(step_s, False, (), ())
    precision, why = target_precision(inp, cluster, options, target)
    roof = _roofline_compute(inp, step_s, batch_size, target, precision, why)
    if roof is not None:
        return roof
    warnings: list[str] = []
    peak_t = target.peak_flops(precision)
    if peak_t is None:
        peak_t = target.peak_flops("fp32")
        if peak_t is None:
            raise UsageError(f"the peak FLOPS of {target.name} are unknown: cannot scale a "
                             f"measurement from {inp.device} to it")
        warnings.append(f"{target.name} has no {precision} peak in the catalog; scaled by FP32")
        precision = "fp32"
    peak_s = src.peak_flops(precision) if src is not None else None
    per_sample = inp.flops_per_sample
    if not per_sample and peak_s is None and inp.model:
        from scalelab.workload import WorkloadSpec, describe

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
    """
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

