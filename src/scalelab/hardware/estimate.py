"""A training step on another device: the roofline per operation, anchored to a measurement.

Given a step's operations (:mod:`scalelab.opcount`), a target device and the precision the
computation runs in, the roofline with the target's fitted fractions gives R_t. With a step
time T_s measured on a catalog GPU, whose roofline is R_s, the estimate keeps what the
measurement knows that the roofline does not (the framework, the kernels, the data layout):

    T_t = T_s * R_t / R_s

and without one (a CPU profile: its time says nothing about a GPU's kernels), T_t = R_t.
Both rooflines include the device's own cost per kernel where the fit has one
(:mod:`scalelab.theory.roofline`). Either way T_t is never below the target's step floor,
kernels x launch_s, nor, when the host's time per operation h is given, below the host's
time to issue the step's N operations: T = max(T_t, N h)
(:func:`scalelab.theory.roofline.step_with_host_s`); the host "sets the step" when N h is
the larger.

The error band is relative: on the fit's leave-one-out evidence, the step is within
T_t x (1 +- band). Anchored, both rooflines contribute, so band = sqrt(b_s^2 + b_t^2) with b
the device's band (:func:`scalelab.hardware.bands.bands`); unanchored, band = b_t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from scalelab import hardware
from scalelab.hardware.bands import Bands
from scalelab.hardware.fit import Fit, roofline_ops
from scalelab.hardware.packaged import fit_and_bands
from scalelab.hardware.reference import PRECISION_MODES, reference
from scalelab.text import format_s
from scalelab.theory.roofline import RooflineStep, host_step_s, roofline_step, step_with_host_s

if TYPE_CHECKING:  # opcount imports torch; an estimate reads counted operations only
    from scalelab.opcount import StepOps


@dataclass(frozen=True)
class Estimate:
    step_s: float
    band: float  # relative error band: the step is within step_s * (1 +- band)
    precision: str
    floor_s: float  # the target's step floor (kernels x launch_s)
    bound: str  # what bounds the target's roofline: compute | memory | launch
    how: str  # one line: the formula with its numbers
    target_device: str
    source_device: str | None = None
    host_s: float = 0.0  # the host's time to issue the step's operations (0: not counted)
    device_s: float = 0.0  # the device's time alone (step_s without the host)

    def __post_init__(self):
        if not (self.step_s > 0 and self.band >= 0 and self.floor_s >= 0):
            raise ValueError(f"estimate: step_s {self.step_s} must be > 0, band {self.band} "
                             f"and floor_s {self.floor_s} >= 0")
        if self.step_s < self.floor_s * (1 - 1e-12):
            raise ValueError(f"estimate: step_s {self.step_s} below the floor {self.floor_s}")

    @property
    def low_s(self) -> float:
        return self.step_s * max(0.0, 1 - self.band)

    @property
    def high_s(self) -> float:
        return self.step_s * (1 + self.band)

    def to_dict(self) -> dict:
        return {"step_s": self.step_s, "band": self.band, "low_s": self.low_s,
                "high_s": self.high_s, "precision": self.precision, "floor_s": self.floor_s,
                "bound": self.bound, "how": self.how, "target_device": self.target_device,
                "source_device": self.source_device, "host_s": self.host_s,
                "device_s": self.device_s}


def device_roofline(ops: StepOps, device: str, precision: str,
                    f: Fit | None = None,
                    source: tuple[str, str] | None = None) -> RooflineStep:
    """The step's roofline on ``device`` with its fitted fractions (``source``: the
    (device, precision) of a measurement it is anchored to, see :meth:`Fit.fractions`)."""
    f = f or fit_and_bands()[0]
    dev = hardware.device(device)
    fr = f.fractions(dev.name, precision, source)
    return roofline_step(roofline_ops(ops, dev, precision), dev.memory_bandwidth_Bps,
                         fr.e_c, fr.e_m, reference().launch_s,
                         f.class_factors(dev.name, precision),
                         {"cuda-core": f.unit_fraction(dev.name, precision)}, fr.kernel_s)


def _gpu(name: str | None) -> hardware.Device | None:
    """The catalog GPU ``name`` names (a name, alias or reported device name), or None."""
    if not name:
        return None
    try:
        dev = hardware.device(name)
    except ValueError:
        dev = hardware.match_device(name)
    if dev is None or dev.peak_flops("fp32") is None or dev.memory_bandwidth_Bps is None:
        return None
    return dev


def _borrowed(f: Fit, device: str, precision: str,
              source: tuple[str, str] | None = None) -> str:
    """Where the target's fractions come from when it has no published point of its own."""
    fr = f.fractions(device, precision, source)
    if fr.points:
        return ""
    whose = fr.fitted_on.replace("+", ", ") if fr.fitted_on else "all fitted devices (pooled)"
    return f"; {device} has no published point: fractions of {whose}"


def _kernels_note(r: RooflineStep) -> str:
    """", K kernels x tau of the device's own cost per kernel" where the roofline has one."""
    if not r.kernels_s:
        return ""
    return (f", with {r.kernels} kernels x {r.kernels_s / r.kernels * 1e6:.3g} us of the "
            "device's own cost per kernel")


def _with_host(est: Estimate, ops: StepOps, host_s_per_op: float | None,
               b: Bands | None = None) -> Estimate:
    """The estimate floored at the host's time to issue the step's operations; a step the
    host sets takes the host-bound band (:meth:`Bands.band`)."""
    if not host_s_per_op:
        return replace(est, device_s=est.step_s)
    n = ops.host_ops(est.precision)
    host = host_step_s(n, host_s_per_op)
    step = step_with_host_s(est.step_s, host)
    if host <= est.step_s:
        how = (f"{est.how}; host: {n} operations x {host_s_per_op * 1e6:.3g} us = "
               f"{format_s(host)}, below the device's time")
        return replace(est, host_s=host, device_s=est.step_s, how=how)
    band = (b or fit_and_bands()[1]).band(est.target_device, est.precision, host_bound=True)
    how = (f"{est.how}; host: {n} operations x {host_s_per_op * 1e6:.3g} us = "
           f"{format_s(host)}, which sets the step (+- {band:.0%}, the host-bound band)")
    return replace(est, step_s=step, host_s=host, device_s=est.step_s, how=how, bound="host",
                   band=band)


def estimate_step(ops: StepOps, target_device: str, precision: str = "fp32",
                  source_device: str | None = None, source_step_s: float | None = None,
                  source_ops: StepOps | None = None, source_precision: str | None = None,
                  f: Fit | None = None, b: Bands | None = None,
                  host_s_per_op: float | None = None) -> Estimate:
    """The step time of ``ops`` on ``target_device`` at ``precision``, with its band.

    ``source_device``/``source_step_s``: where and how long the step was measured (at
    ``source_ops``' batch, default the same ops, and ``source_precision``, default the same
    precision). ``f`` and ``b``: the fit and its bands (default: the reference table's, as
    a plan reads them).
    A source that is not a catalog GPU with known peaks (a CPU) is not used as an
    anchor: the estimate is the target's roofline alone, and says so. ``host_s_per_op``:
    the target host's time to issue one operation; the step is at least that times the
    operations (:meth:`StepOps.host_ops`).
    """
    return _with_host(_device_estimate(ops, target_device, precision, source_device,
                                       source_step_s, source_ops, source_precision, f, b),
                      ops, host_s_per_op, b)


def _device_estimate(ops: StepOps, target_device: str, precision: str,
                     source_device: str | None, source_step_s: float | None,
                     source_ops: StepOps | None, source_precision: str | None,
                     f: Fit | None, b: Bands | None) -> Estimate:
    if precision not in PRECISION_MODES:
        raise ValueError(f"unknown precision {precision!r} ({', '.join(PRECISION_MODES)})")
    if source_step_s is not None and not source_step_s > 0:
        raise ValueError(f"source_step_s must be > 0, got {source_step_s}")
    if f is None or b is None:
        pf, pb = fit_and_bands()
        f, b = f or pf, b or pb
    target = hardware.device(target_device)
    b_t = b.band(target.name, precision)
    src = _gpu(source_device)
    if src is not None and source_step_s is not None:
        sp = source_precision or precision
        anchor = (src.name, sp)
        rt = device_roofline(ops, target.name, precision, f, anchor)
        rs = device_roofline(source_ops or ops, src.name, sp, f)
        step = max(source_step_s * rt.step_s / rs.step_s, rt.floor_s)
        band = math.hypot(b.band(src.name, sp), b_t)
        how = (f"T = {format_s(source_step_s)} measured on {src.name} x roofline "
               f"{format_s(rt.step_s)} ({target.name}, {precision}{_kernels_note(rt)}) / "
               f"{format_s(rs.step_s)} ({src.name}, {sp}{_kernels_note(rs)}) = "
               f"{format_s(step)} +- {band:.0%}{_borrowed(f, target.name, precision, anchor)}")
        return Estimate(step, band, precision, rt.floor_s, rt.bound, how, target.name, src.name)
    rt = device_roofline(ops, target.name, precision, f)
    fr = f.fractions(target.name, precision)
    why = (f" ({source_device} is not a GPU with known peaks: its time is not used)"
           if source_device else "")
    e_u = f.unit_fraction(target.name, precision)
    units = f", FP32-unit ops at {e_u:.2f} of the FP32 peak" if e_u != 1.0 else ""
    units += _kernels_note(rt)
    how = (f"T = roofline of {ops.model} at batch {ops.batch_size} on {target.name} "
           f"({precision}, e_c {fr.e_c:.2f}, e_m {fr.e_m:.2f}{units}) = {format_s(rt.step_s)} "
           f"+- {b_t:.0%}{why}{_borrowed(f, target.name, precision)}")
    return Estimate(rt.step_s, b_t, precision, rt.floor_s, rt.bound, how, target.name,
                    source_device)
