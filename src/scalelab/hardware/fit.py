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

Error bands from leave-one-out predictions: :mod:`scalelab.hardware.bands`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from scalelab import hardware
from scalelab.hardware.reference import RefPoint, reference
from scalelab.opclasses import AUTOCAST_FP32_OPS, OP_CLASSES
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
    """The step's operations, each at the precision the configuration gives it.

    Peaks (:func:`compute_peaks`): dense convolutions at the convolution peak (TF32 by
    default where the device has it), matrix products and attention at the matrix-product
    peak (FP32 unless TF32 or autocast is asked), grouped and depthwise convolutions on the
    FP32 units (their kernels do not use tensor cores), everything else FP32. Bytes: under
    autocast (fp16/bf16) activations and their gradients are half-size, so an operation
    moves half its fp32 bytes, except the operations autocast keeps in fp32
    (:data:`scalelab.opcount.AUTOCAST_FP32_OPS`: layer and group norm, softmax, the losses)
    and the optimizer (fp32 parameters and state).
    """
    conv, mm, other = compute_peaks(device, precision)
    peaks = {"conv": conv, "matmul": mm, "attention": mm}
    out = []
    for o in ops.ops:
        full = o.phase == "optimizer" or o.name in AUTOCAST_FP32_OPS
        scale = 0.5 if precision in _HALF and not full else 1.0
        peak = peaks.get(o.op_class, mm if o.tensor_core and o.op_class == "elementwise"
                         else other)
        out.append(RooflineOp(o.flops, o.bytes_fp32 * scale, peak, o.kernels, o.op_class))
    return out


class _Curve:
    """R(e_c, e_m) of one step on one device, evaluated fast on arrays of fractions.

    With a_i = F_i/(P_i k_c) and b_i = B_i/(W k_m) (k: the op's class factors), op i is
    compute-bound iff a_i/b_i > e_c/e_m; sorted by that ratio, R = (sum of a over the
    compute-bound ops)/e_c + (sum of b over the rest)/e_m, floored at the step's floor
    (kernels x launch_s, or the host's operations x its time per operation, the larger).
    The fractions are not capped at 1 after the class factors here.
    """

    def __init__(self, a: np.ndarray, b: np.ndarray, floor_s: float):
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(b > 0, a / np.where(b > 0, b, 1.0), np.inf)
        order = np.argsort(r, kind="stable")
        self.r = r[order]
        self.a_cum = np.concatenate([[0.0], np.cumsum(a[order])])
        self.b_cum = np.concatenate([[0.0], np.cumsum(b[order])])
        self.floor_s = floor_s

    def __call__(self, e_c, e_m):
        e_c, e_m = np.asarray(e_c, float), np.asarray(e_m, float)
        idx = np.searchsorted(self.r, e_c / e_m, side="right")
        t = (self.a_cum[-1] - self.a_cum[idx]) / e_c + self.b_cum[idx] / e_m
        return np.maximum(t, self.floor_s)


@lru_cache(maxsize=1024)
def _raw(p: RefPoint):
    """(a_i, b_i, class index_i, floor_s) of point ``p``'s operations on its device."""
    dev = hardware.device(p.device)
    ops = p.ops()
    rops = roofline_ops(ops, dev, p.precision)
    a = np.array([o.flops / o.peak_flops for o in rops])
    b = np.array([o.nbytes / dev.memory_bandwidth_Bps for o in rops])
    cls = np.array([OP_CLASSES.index(o.op_class) for o in rops])
    ref = reference()
    floor = max(sum(o.kernels for o in rops) * ref.launch_s,
                ops.host_ops(p.precision) * ref.host_s_per_op)
    return a, b, cls, floor


def _factor_arrays(factors) -> tuple[np.ndarray, np.ndarray]:
    kc = np.ones(len(OP_CLASSES))
    km = np.ones(len(OP_CLASSES))
    for name, c, m in factors:
        kc[OP_CLASSES.index(name)], km[OP_CLASSES.index(name)] = c, m
    return kc, km


@lru_cache(maxsize=8192)
def _curve(p: RefPoint, factors: tuple = ()) -> _Curve:
    a, b, cls, floor = _raw(p)
    kc, km = _factor_arrays(factors)
    return _Curve(a / kc[cls], b / km[cls], floor)


def point_curve(p: RefPoint, factors: tuple = ()) -> _Curve:
    """The point's curve R(e_c, e_m) with class factors ``((class, k_c, k_m), ...)``."""
    return _curve(p, factors)


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


def twin_key(device: hardware.Device) -> tuple:
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
    # fit class -> ((operation class, k_c, k_m), ...): the classes' factors on e_c, e_m
    factors: dict[str, tuple] = field(default_factory=dict)

    def factor_key(self, device: str, precision: str) -> tuple:
        """The operation classes' factors for ``device`` at ``precision``, as a key."""
        return self.factors.get(fit_class(device, precision), ())

    def class_factors(self, device: str, precision: str) -> dict[str, tuple[float, float]]:
        """{operation class: (k_c, k_m)} for ``device`` at ``precision``."""
        return {c: (kc, km) for c, kc, km in self.factor_key(device, precision)}

    def _own(self, device: str, cls: str) -> tuple[str, DeviceFit] | None:
        """((name, fractions)) of ``device`` or of its same-chip twin in ``cls``, if fitted."""
        own = self.devices.get((device, cls))
        if own is not None:
            return device, own
        twin = twin_key(hardware.device(device))
        for (name, c), v in sorted(self.devices.items()):
            if c == cls and twin_key(hardware.device(name)) == twin:
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


def _fit_device(points: Sequence[RefPoint], prior: tuple[float, float],
                factors: tuple = ()) -> tuple[float, float, float]:
    """(e_c, e_m, loss) of one device's points with the classes' ``factors``."""
    ec, em = np.meshgrid(_GRID, _GRID, indexing="ij")
    loss = _LAMBDA * ((np.log(ec) - math.log(prior[0])) ** 2
                      + (np.log(em) - math.log(prior[1])) ** 2)
    for p in points:
        loss = loss + (np.log(point_curve(p, factors)(ec, em)) - math.log(p.step_s)) ** 2
    i, j = np.unravel_index(int(np.argmin(loss)), loss.shape)
    return float(_GRID[i]), float(_GRID[j]), float(loss[i, j])


# Operation-class factors fitted (k_c: compute-bound kernels, k_m: memory-bound ones); dense
# convolutions and element-wise operations are the reference (1, 1).
FREE_FACTORS = (("matmul", 0), ("conv_grouped", 0), ("attention", 0), ("conv", 1),
                ("conv_grouped", 1), ("norm", 1), ("pool", 1), ("optimizer", 1))
_K_GRID = np.logspace(math.log10(0.25), math.log10(4.0), 9)
# Fit classes whose operation-class factors are fitted: only where the reference has many
# models on more than one device (fp16/bf16: timm's 21 models on an RTX 3090, six on an
# H200); in the others nearly every point is a ResNet-50, and their factors stay 1.
FACTOR_FIT_CLASSES = ("half",)
_LAMBDA_K = 0.05  # pulls a factor toward 1 unless many points ask otherwise


def _with(factors: tuple, name: str, which: int, value: float) -> tuple:
    d = {c: [kc, km] for c, kc, km in factors}
    d.setdefault(name, [1.0, 1.0])[which] = float(value)
    return tuple(sorted((c, v[0], v[1]) for c, v in d.items() if v != [1.0, 1.0]))


def _fit_factors(groups: dict, priors: dict, cls: str) -> tuple:
    """Coordinate search of the operation classes' factors of fit class ``cls``: each
    factor in turn takes the grid value that minimizes the summed loss of the devices'
    fits plus ``_LAMBDA_K (ln k)^2`` per factor (so a factor only moves from 1 when the
    points of several models ask for it; ties keep the current value, so a class no point
    exercises stays 1)."""
    mine = {k: ps for k, ps in groups.items() if k[1] == cls}
    present = {o.op_class for ps in mine.values() for p in ps for o in p.ops().ops}

    def loss(factors):
        prior = _LAMBDA_K * sum(math.log(kc) ** 2 + math.log(km) ** 2 for _, kc, km in factors)
        return prior + sum(_fit_device(ps, priors[cls], factors)[2] for ps in mine.values())

    factors: tuple = ()
    best = loss(factors)
    for _ in range(2):
        for name, which in FREE_FACTORS:
            if name not in present:
                continue
            for v in _K_GRID:
                trial = _with(factors, name, which, v)
                t = loss(trial)
                if t < best - 1e-9:
                    factors, best = trial, t
    return factors


def fit(points: Sequence[RefPoint] | None = None, classes: bool = True,
        factors: dict[str, tuple] | None = None) -> Fit:
    """e_c, e_m per (device, fit class) in ``points`` (default: the reference table), and
    with ``classes`` the operation classes' factors per fit class (fitted, or ``factors``
    as given: {fit class: ((operation class, k_c, k_m), ...)})."""
    points = tuple(reference().points if points is None else points)
    given = None if factors is None else tuple(sorted(factors.items()))
    return _fit_cached(tuple(sorted(points, key=lambda p: p.key)), classes, given)


def _geomean(values: Sequence[tuple[float, float]], default: tuple[float, float]):
    if not values:
        return default
    return (math.exp(sum(math.log(v[0]) for v in values) / len(values)),
            math.exp(sum(math.log(v[1]) for v in values) / len(values)))


@lru_cache(maxsize=256)
def _fit_cached(points: tuple[RefPoint, ...], classes: bool = True,
                given: tuple | None = None) -> Fit:
    groups: dict[tuple[str, str], list[RefPoint]] = {}
    for p in points:
        groups.setdefault((p.device, fit_class(p.device, p.precision)), []).append(p)
    priors = {c: (0.5, 0.5) for c in FIT_CLASSES}
    factors: dict[str, tuple] = dict(given or ())
    fitted: dict[tuple[str, str], tuple[float, float, float]] = {}
    for r in range(_ROUNDS):
        if classes and given is None and r == 1:  # once the priors have settled
            factors = {c: _fit_factors(groups, priors, c) for c in FACTOR_FIT_CLASSES}
        fitted = {k: _fit_device(ps, priors[k[1]], factors.get(k[1], ()))
                  for k, ps in sorted(groups.items())}
        priors = {c: _geomean([v[:2] for k, v in fitted.items() if k[1] == c], priors[c])
                  for c in priors}
    devices = {k: DeviceFit(v[0], v[1], len(groups[k]), k[0]) for k, v in fitted.items()}
    return Fit(devices, {c: DeviceFit(*v, 0) for c, v in priors.items()},
               groups={k: frozenset(p.group for p in ps) for k, ps in groups.items()},
               factors={c: f for c, f in factors.items() if f})


def predict_step_s(p: RefPoint, f: Fit) -> float:
    """Absolute roofline step time of point ``p``'s workload on its device under ``f``."""
    fr = f.fractions(p.device, p.precision)
    return float(point_curve(p, f.factor_key(p.device, p.precision))(fr.e_c, fr.e_m))
