"""Achievable fractions e_c, e_m per device, fitted to published training throughputs.

The roofline (:mod:`scalelab.theory.roofline`) needs, per device, the fraction of its peak
FLOP/s (e_c) and of its memory bandwidth (e_m) that a training step's kernels reach. They
are fitted to the reference table: for a device d with points p (model, precision, batch,
measured step time T_p),

    minimize  sum_p (ln R_p(e_c, e_m) - ln T_p)^2
              + lam * ((ln e_c - ln E_c)^2 + (ln e_m - ln E_m)^2)

where R_p is the roofline step time of p's operations on d and (E_c, E_m) the geometric
mean of all devices' fractions (refined a few times). The small penalty ``lam`` settles the
fractions of a device with a single point (one equation, two unknowns) near what other
devices reach, and leaves a device with points in both regimes (fp32 and fp16) to its data.
A device with no points borrows those of its GPU generation (the geometric mean over the
fitted devices of that generation, else of the nearest one): how well the libraries'
kernels use the units changes with the generation (in the table, of the FP32 peak: K40
0.24 and K80 0.38, Pascal 0.45-0.67, Turing 0.70-0.77, V100 0.84), and with the software
release, which the table shows only as scatter within a generation. One with no known
generation gets (E_c, E_m). The search is a grid over [0.005, 1] in both, so
the result is deterministic.

Anchored to a measurement on a fitted GPU of another generation (:meth:`Fit.fractions` with
``source``), an unfitted device borrows its generation's fractions *relative to the
source's*, as they were measured together: in each reference group (one benchmark and
software release) that holds both a fitted device of the borrowed generation and the source
(else a device of the source's generation), the ratio of their fractions; the target gets
the source's fractions times the geometric mean of those ratios. The software release a
fraction was measured under then cancels in the ratio, as it does between the source and
the target of the measurement being carried over (the K40 measured in 2016 Torch, for
instance, carries the 2016 ratio of Kepler to Pascal to a 2017 TensorFlow P100, not its
2016 fraction). A source of the borrowed generation, or no group with both, leaves the
plain rule.

Error bands (:func:`bands`): each point is left out in turn and predicted by a fit without
it; per fit class, a fitted device's band is the median |relative error| and an unfitted
device's the largest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from scalelab import hardware
from scalelab.hardware.reference import RefPoint, reference
from scalelab.theory.roofline import RooflineOp

if TYPE_CHECKING:  # opcount imports torch; the fit reads counted operations only
    from scalelab.opcount import StepOps

_GRID = np.logspace(math.log10(0.005), 0.0, 121)
_LAMBDA = 0.02
_ROUNDS = 4
_HALF = ("fp16", "bf16")


def compute_peaks(device: hardware.Device, precision: str) -> tuple[float, float, float]:
    """(convolution peak, matrix-product peak, other-ops peak) in FLOP/s at ``precision``.

    PyTorch's defaults: ``torch.backends.cudnn.allow_tf32`` is True, so convolutions run in
    TF32 on devices that have it, while ``torch.backends.cuda.matmul.allow_tf32`` is False,
    so matrix products stay FP32 ("fp32"); "tf32" sets both; "fp16"/"bf16" is autocast,
    with tensor-core operations at that precision's peak. A precision the device lacks falls
    back to its FP32 peak (how the framework would run it).
    """
    fp32 = device.peak_flops("fp32")
    if fp32 is None or device.memory_bandwidth_Bps is None:
        raise ValueError(f"{device.name}: its FP32 peak or memory bandwidth is unknown, so "
                         "its step time cannot be estimated (profile on it instead)")
    tf32 = device.peak_flops("tf32") or fp32
    if precision == "fp32":
        return tf32, fp32, fp32
    if precision == "tf32":
        return tf32, tf32, fp32
    half = device.peak_flops(precision) or fp32
    return half, half, fp32


def roofline_ops(ops: StepOps, device: hardware.Device, precision: str) -> list[RooflineOp]:
    """The step's operations with the peak of the units that run them and their bytes.

    Under autocast (fp16/bf16) activations and their gradients are half-size, so every
    forward and backward operation moves half its fp32 bytes; the optimizer keeps fp32
    parameters and state.
    """
    conv, mm, other = compute_peaks(device, precision)
    out = []
    for o in ops.ops:
        scale = 0.5 if precision in _HALF and o.phase != "optimizer" else 1.0
        peak = (conv if o.name.startswith(("convolution", "_convolution", "cudnn_conv"))
                else mm) if o.tensor_core else other
        out.append(RooflineOp(o.flops, o.bytes_fp32 * scale, peak, o.kernels))
    return out


class _Curve:
    """R(e_c, e_m) of one step on one device, evaluated fast on arrays of fractions.

    With a_i = F_i/P_i and b_i = B_i/W, op i is compute-bound iff a_i/b_i > e_c/e_m; sorted
    by that ratio, R = (sum of a over the compute-bound ops)/e_c + (sum of b over the rest)/
    e_m, floored at kernels x launch_s.
    """

    def __init__(self, rops: Sequence[RooflineOp], bandwidth_Bps: float, launch_s: float):
        a = np.array([o.flops / o.peak_flops for o in rops])
        b = np.array([o.nbytes / bandwidth_Bps for o in rops])
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(b > 0, a / np.where(b > 0, b, 1.0), np.inf)
        order = np.argsort(r, kind="stable")
        self.r = r[order]
        self.a_cum = np.concatenate([[0.0], np.cumsum(a[order])])
        self.b_cum = np.concatenate([[0.0], np.cumsum(b[order])])
        self.floor_s = sum(o.kernels for o in rops) * launch_s

    def __call__(self, e_c, e_m):
        e_c, e_m = np.asarray(e_c, float), np.asarray(e_m, float)
        idx = np.searchsorted(self.r, e_c / e_m, side="right")
        t = (self.a_cum[-1] - self.a_cum[idx]) / e_c + self.b_cum[idx] / e_m
        return np.maximum(t, self.floor_s)


@lru_cache(maxsize=512)
def _curve(p: RefPoint) -> _Curve:
    dev = hardware.device(p.device)
    rops = roofline_ops(p.ops(), dev, p.precision)
    return _Curve(rops, dev.memory_bandwidth_Bps, reference().launch_s)


def point_curve(p: RefPoint) -> _Curve:
    return _curve(p)


def precision_class(precision: str) -> str:
    """"full" (fp32, tf32) or "half" (fp16, bf16 autocast): fractions are fitted per class."""
    return "half" if precision in _HALF else "full"


FIT_CLASSES = ("cuda-core", "tf32", "half")


def fit_class(device: str, precision: str) -> str:
    """Which units run the step's convolutions: fractions are fitted per such class.

    "half": autocast on a device with tensor cores at that precision; "tf32": fp32/tf32 on a
    device with TF32 tensor cores (PyTorch runs convolutions in TF32 by default); otherwise
    "cuda-core": plain FP32 units (V100 in fp32, P100, K80). The same code reaches different
    fractions of the peak on different units, so each class has its own pooled fractions.
    """
    dev = hardware.device(device)
    if precision in _HALF and dev.peak_flops(precision) is not None:
        return "half"
    if dev.peak_flops("tf32") is not None and precision in ("fp32", "tf32"):
        return "tf32"
    return "cuda-core"


def _twin_key(device: hardware.Device) -> tuple:
    """What identifies the silicon and clocks: the peaks and the memory bandwidth."""
    return (device.fp32_tflops, device.tf32_tflops, device.fp16_tflops, device.bf16_tflops,
            device.memory_bandwidth_Bps)


@dataclass(frozen=True)
class DeviceFit:
    e_c: float
    e_m: float
    points: int  # reference points the fractions were fitted to (0: borrowed or pooled)
    fitted_on: str = ""  # the device(s) whose points they come from ("" for pooled)


@dataclass(frozen=True)
class Fit:
    devices: dict[tuple[str, str], DeviceFit]  # (device, fit class) -> fractions
    pooled: dict[str, DeviceFit]  # fit class -> geometric mean over devices
    by_generation: bool = True  # an unfitted device borrows its generation's fractions
    # (device, fit class) -> the reference groups its points come from
    groups: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)

    def _own(self, device: str, cls: str) -> tuple[str, DeviceFit] | None:
        """((name, fractions)) of ``device`` or of its same-chip twin in ``cls``, if fitted."""
        own = self.devices.get((device, cls))
        if own is not None:
            return device, own
        twin = _twin_key(hardware.device(device))
        for (name, c), v in sorted(self.devices.items()):
            if c == cls and _twin_key(hardware.device(name)) == twin:
                return name, v
        return None

    def fractions(self, device: str, precision: str,
                  source: tuple[str, str] | None = None) -> DeviceFit:
        """The device's own fractions; else those of a device with the same peaks and
        bandwidth (the same chip at the same clocks, e.g. V100 SXM2 16 and 32 GB); else the
        geometric mean over the fitted devices of its GPU generation; else over those of the
        nearest generation(s) of its vendor (both neighbours when they are as near); else
        the pooled ones. With ``source`` (device, precision) of the measurement carried
        over, a borrowed generation's fractions are taken relative to the source's (see
        the module's docstring)."""
        cls = fit_class(device, precision)
        own = self._own(device, cls)
        if own is not None:
            return own[1]
        dev = hardware.device(device)
        near = self._nearest_generation(dev, cls) if self.by_generation else []
        if near:
            anchored = self._anchored(near, cls, source) if source else None
            if anchored is not None:
                return anchored
            ec, em = _geomean([(v.e_c, v.e_m) for _, v in near], (0.5, 0.5))
            return DeviceFit(ec, em, 0, "+".join(name for name, _ in near))
        return self.pooled[cls]

    def _anchored(self, near, cls: str, source: tuple[str, str]) -> DeviceFit | None:
        """The source's fractions x (borrowed generation / source) where measured together."""
        s_cls = fit_class(source[0], source[1])
        found = self._own(source[0], s_cls)
        gens = {hardware.device(name).generation for name, _ in near}
        s_gen = hardware.device(source[0]).generation
        if found is None or s_gen in gens:
            return None
        s_name, s_fr = found
        ratios, where = [], []
        for g in sorted(set().union(*self.groups.values()) if self.groups else ()):
            sibs = [(v.e_c, v.e_m) for (d, c), v in sorted(self.devices.items())
                    if c == cls and hardware.device(d).generation in gens
                    and g in self.groups.get((d, c), ())]
            if g in self.groups.get((s_name, s_cls), ()):
                peers = [(s_fr.e_c, s_fr.e_m)]
            else:
                peers = [(v.e_c, v.e_m) for (d, c), v in sorted(self.devices.items())
                         if c == s_cls and hardware.device(d).generation == s_gen
                         and g in self.groups.get((d, c), ())]
            if sibs and peers:
                a, b = _geomean(sibs, (0.5, 0.5)), _geomean(peers, (0.5, 0.5))
                ratios.append((a[0] / b[0], a[1] / b[1]))
                where.append(g)
        if not ratios:
            return None
        rc, rm = _geomean(ratios, (1.0, 1.0))
        names = "+".join(name for name, _ in near)
        return DeviceFit(min(1.0, s_fr.e_c * rc), min(1.0, s_fr.e_m * rm), 0,
                         f"{names} relative to {s_name} (as measured together in "
                         f"{', '.join(where)})")

    def _nearest_generation(self, dev: hardware.Device, cls: str):
        """[(device, fractions)] of the fitted devices in ``cls`` nearest to ``dev``'s
        generation (distance 0 is its own), or [] when none shares its vendor."""
        rank = hardware.generation_rank(dev.generation)
        if rank is None:
            return []
        by_distance: dict[int, list] = {}
        for (name, c), v in sorted(self.devices.items()):
            other = hardware.generation_rank(hardware.device(name).generation)
            if c == cls and other is not None and other[0] == rank[0]:
                by_distance.setdefault(abs(other[1] - rank[1]), []).append((name, v))
        return by_distance[min(by_distance)] if by_distance else []


def _fit_device(points: Sequence[RefPoint], prior: tuple[float, float]) -> tuple[float, float]:
    ec, em = np.meshgrid(_GRID, _GRID, indexing="ij")
    loss = _LAMBDA * ((np.log(ec) - math.log(prior[0])) ** 2
                      + (np.log(em) - math.log(prior[1])) ** 2)
    for p in points:
        loss = loss + (np.log(point_curve(p)(ec, em)) - math.log(p.step_s)) ** 2
    i, j = np.unravel_index(int(np.argmin(loss)), loss.shape)
    return float(_GRID[i]), float(_GRID[j])


def fit(points: Sequence[RefPoint] | None = None) -> Fit:
    """e_c, e_m per (device, fit class) in ``points`` (default: the reference table)."""
    points = tuple(reference().points if points is None else points)
    return _fit_cached(tuple(sorted(points, key=lambda p: p.key)))


def _geomean(values: Sequence[tuple[float, float]], default: tuple[float, float]):
    if not values:
        return default
    return (math.exp(sum(math.log(v[0]) for v in values) / len(values)),
            math.exp(sum(math.log(v[1]) for v in values) / len(values)))


@lru_cache(maxsize=256)
def _fit_cached(points: tuple[RefPoint, ...]) -> Fit:
    groups: dict[tuple[str, str], list[RefPoint]] = {}
    for p in points:
        groups.setdefault((p.device, fit_class(p.device, p.precision)), []).append(p)
    priors = {c: (0.5, 0.5) for c in FIT_CLASSES}
    fitted: dict[tuple[str, str], tuple[float, float]] = {}
    for _ in range(_ROUNDS):
        fitted = {k: _fit_device(ps, priors[k[1]]) for k, ps in sorted(groups.items())}
        priors = {c: _geomean([v for k, v in fitted.items() if k[1] == c], priors[c])
                  for c in priors}
    devices = {k: DeviceFit(ec, em, len(groups[k]), k[0]) for k, (ec, em) in fitted.items()}
    return Fit(devices, {c: DeviceFit(*v, 0) for c, v in priors.items()},
               groups={k: frozenset(p.group for p in ps) for k, ps in groups.items()})


def predict_step_s(p: RefPoint, f: Fit) -> float:
    """Absolute roofline step time of point ``p``'s workload on its device under ``f``."""
    fr = f.fractions(p.device, p.precision)
    return float(point_curve(p)(fr.e_c, fr.e_m))


@dataclass(frozen=True)
class Bands:
    """Relative error bands of the fit, per fit class, from leave-one-out errors.

    A device with its own points in that class gets the class's median |LOO error| (how far
    a roofline with fitted fractions typically misses a device); a device without them gets
    the class's largest |LOO error| (the worst miss when a device's point was left out).
    """

    seen: dict[str, float]  # fit class -> band for a device fitted in that class
    unseen: dict[str, float]  # fit class -> band for a device that is not
    fitted: frozenset  # (device, fit class) pairs with points
    loo_errors: tuple[tuple[RefPoint, float], ...]  # (point, predicted/measured - 1)

    def band(self, device: str, precision: str) -> float:
        cls = fit_class(device, precision)
        twin = _twin_key(hardware.device(device))
        seen = any(c == cls and _twin_key(hardware.device(d)) == twin for d, c in self.fitted)
        return (self.seen if seen else self.unseen).get(cls, max(self.unseen.values(),
                                                                 default=1.0))

    def without(self, device: str) -> Bands:
        """The bands as if ``device`` (and its same-chip twins) had no reference points."""
        twin = _twin_key(hardware.device(device))
        return replace(self, fitted=frozenset(
            (d, c) for d, c in self.fitted if _twin_key(hardware.device(d)) != twin))


def _median(values: Sequence[float]) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


@lru_cache(maxsize=1)
def bands() -> Bands:
    """Leave-one-out errors of the packaged reference fit, summarized per fit class.

    Each point is predicted by a fit without it; a device whose only point in a class is
    left out falls back to a same-chip device or to the class's pooled fractions (not to its
    generation's), so these errors measure how far devices' fractions spread around the
    class: per-class medians of 11-25% on the fit's own table, where the generation's
    fractions miss by 10-18%. Neither says how much a device pair's ratio moves between
    software releases.
    """
    points = reference().points
    loo = []
    for i, p in enumerate(points):
        f = replace(fit(points[:i] + points[i + 1:]), by_generation=False)
        loo.append((p, predict_step_s(p, f) / p.step_s - 1.0))
    by_class: dict[str, list[float]] = {}
    for p, e in loo:
        by_class.setdefault(fit_class(p.device, p.precision), []).append(abs(e))
    seen = {c: _median(v) for c, v in by_class.items()}
    unseen = {c: max(v) for c, v in by_class.items()}
    fitted = frozenset((p.device, fit_class(p.device, p.precision)) for p in points)
    return Bands(seen, unseen, fitted, tuple(loo))
