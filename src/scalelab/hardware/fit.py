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

Units. A step's operations that run on other units than its convolutions (matrix products
in PyTorch's default fp32 on a TF32 device, depthwise convolutions) take the device's
fraction on those units, e_u (:meth:`Fit.unit_fraction`): its "cuda-core" fraction, own
or borrowed by the rules above. The "cuda-core" class is therefore fitted first in each
round, and the other classes with its fractions (the H200's FP32 matrix products take the
Turing cards' fraction of the FP32 peak, the nearest generation fitted on those units).

The host. A point's step is R_p floored at N_p x h (:func:`scalelab.theory.roofline.
host_step_s`), with h one machine's time to issue an operation. h is fitted per device,
shared by its classes (:func:`_fit_machine`): a grid from 0.5 to 4 times the packaged
measurement h0, each value's loss the sum of the classes' best fits plus a pull toward h0;
where no point could sit on the floor even at 4 h0 with the fractions at 1, h stays h0.
So h moves only where the device's own points show their host setting the step, and it is
fitted to those fitted rows alone.

The device's own cost per kernel. A device whose points in a class hold at least
:data:`MIN_KERNEL_MODELS` networks also gets tau, a time per kernel added to its roofline
(:mod:`scalelab.theory.roofline`), fitted with its fractions on a grid from 0 to 80 us (after
the first round, the round before's value and its neighbours on it) and pulled toward 0;
elsewhere tau is 0 (one network at several batches cannot tell it from the fractions). A
device that borrows fractions borrows the mean tau of the devices they come
from. The cost and the fractions trade against each other: on the H200 in fp32 they come
out at e_c 0.38, e_m 0.49 and 57 us where, without tau, one pair of fractions left its
convolutional networks 18-33% off in the fit itself (e_c 0.33, e_m 0.30).

Error bands from leave-one-out predictions: :mod:`scalelab.hardware.bands`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from scalelab import hardware
from scalelab.hardware.curve import (  # noqa: F401 - the fit's public names, re-exported
    FIT_CLASSES,
    _classes,
    _Curve,
    _Grid,
    compute_peaks,
    fit_class,
    point_curve,
    precision_class,
    roofline_ops,
    twin_key,
)
from scalelab.hardware.grid_search import (  # noqa: F401 - MIN_KERNEL_MODELS re-exported
    MIN_KERNEL_MODELS,
    _fit_machine,
)
from scalelab.hardware.reference import RefPoint, reference

_ROUNDS = 4


@dataclass(frozen=True)
class DeviceFit:
    e_c: float
    e_m: float
    points: int  # reference points the fractions were fitted to (0: borrowed or pooled)
    fitted_on: str = ""  # the device(s) whose points they come from ("" for pooled)
    host_s_per_op: float = 0.0  # the host time per operation fitted with them (0: none)
    host_bound: int = 0  # of the points, those the fitted host time sets
    kernel_s: float = 0.0  # the device's own cost per kernel fitted with them (0: none)


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

    def unit_fraction(self, device: str, precision: str) -> float:
        """e_u: the compute fraction ``device`` reaches on its FP32 units, for the operations
        that run there while the step's convolutions use tensor cores (see
        :func:`roofline_ops`): its fractions in the "cuda-core" class, own or borrowed by
        the same rules as :meth:`fractions`. 1.0 (unused) in that class itself."""
        if fit_class(device, precision) == "cuda-core":
            return 1.0
        # as the fit took it, by generation even in a view without (the bands' left-out fits)
        f = self if self.by_generation else replace(self, by_generation=True)
        return f.class_fractions(device, "cuda-core").e_c

    def host_s_per_op(self, device: str) -> tuple[float, str]:
        """(the host's time per operation for steps on ``device``, where it comes from).

        Fitted with the device's fractions where its own points show their host setting the
        step (:meth:`own_host_s_per_op`); else the packaged measurement (``reference.toml``
        [host])."""
        own = self.own_host_s_per_op(device)
        if own is not None:
            return own
        ref = reference()
        return ref.host_s_per_op, f"scalelab's packaged measurement ({ref.host_source})"

    def own_host_s_per_op(self, device: str) -> tuple[float, str] | None:
        """(h, where) fitted to ``device``'s own points where their host sets some of their
        steps (the class with the most such points, :func:`_fit_device`), else None."""
        own = [(v.host_bound, name, c, v) for (name, c), v in sorted(self.devices.items())
               if name == device and v.host_bound]
        if not own:
            return None
        n, name, c, v = max(own, key=lambda t: t[0])
        return v.host_s_per_op, (f"fitted to {name}'s reference points ({c} class: "
                                 f"{v.points} points, {n} set by their host)")

    def curve(self, p: RefPoint) -> _Curve:
        """Point ``p``'s curve R(e_c, e_m) under this fit: its classes' factors, its FP32
        units' fraction and its device's host time per operation."""
        return point_curve(p, self.factor_key(p.device, p.precision),
                           self.unit_fraction(p.device, p.precision),
                           self.host_s_per_op(p.device)[0],
                           self.fractions(p.device, p.precision).kernel_s)

    def fractions(self, device: str, precision: str,
                  source: tuple[str, str] | None = None) -> DeviceFit:
        """The device's own fractions; else those of a device with the same peaks and
        bandwidth (the same chip at the same clocks, e.g. V100 SXM2 16 and 32 GB); else the
        geometric mean over the fitted devices of its GPU generation; else over those of the
        nearest generation(s) of its vendor (both neighbours when they are as near); else
        the pooled ones. With ``source`` (device, precision) of the measurement carried
        over, a borrowed generation's fractions are taken relative to the source's (see
        the module's docstring)."""
        return self.class_fractions(device, fit_class(device, precision), source)

    def class_fractions(self, device: str, cls: str,
                        source: tuple[str, str] | None = None) -> DeviceFit:
        """:meth:`fractions` of ``device`` in fit class ``cls``."""
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
            return DeviceFit(ec, em, 0, "+".join(name for name, _ in near),
                             kernel_s=_mean_kernel_s(near))
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
                         f"{', '.join(where)})", kernel_s=_mean_kernel_s(near))

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


# Operation-class factors fitted (k_c: compute-bound kernels, k_m: memory-bound ones); dense
# convolutions and element-wise operations are the reference (1, 1).
FREE_FACTORS = (("matmul", 0), ("conv_grouped", 0), ("attention", 0), ("conv", 1),
                ("conv_grouped", 1), ("norm", 1), ("pool", 1), ("optimizer", 1),
                ("conv_nchw", 0), ("conv_nchw", 1))
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


def _fit_factors(groups: dict, priors: dict, cls: str, e_u: dict,
                 kernel_s: dict | None = None) -> tuple:
    """Coordinate search of the operation classes' factors of fit class ``cls``: each
    factor in turn takes the grid value that minimizes the summed loss of the devices'
    fits plus ``_LAMBDA_K (ln k)^2`` per factor (so a factor only moves from 1 when the
    points of several models ask for it; ties keep the current value, so a class no point
    exercises stays 1). The costs per kernel stay those of ``kernel_s``."""
    mine = {k: ps for k, ps in groups.items() if k[1] == cls}
    present = set().union(*(_classes(p) for ps in mine.values() for p in ps))

    seen: dict[tuple, float] = {}  # a trial at a factor's current value is the current set

    def loss(factors):
        if factors not in seen:
            prior = _LAMBDA_K * sum(math.log(kc) ** 2 + math.log(km) ** 2
                                    for _, kc, km in factors)
            fitted = _fit_machine(mine, priors, {cls: factors}, e_u, kernel_s)
            seen[factors] = prior + sum(v[2] for v in fitted.values())
        return seen[factors]

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


def _mean_kernel_s(near) -> float:
    """The mean cost per kernel of the fitted devices ``near`` [(name, fractions)] whose
    fractions a device borrows (their fractions were fitted with it)."""
    return sum(v.kernel_s for _, v in near) / len(near) if near else 0.0


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
    fitted: dict[tuple[str, str], tuple] = {}
    for r in range(_ROUNDS):
        taus = {k: v[5] for k, v in fitted.items()}  # the costs per kernel of the round before
        # plain FP32 units first: the other classes' FP32-unit operations take their fraction
        fitted = _fit_machine({k: ps for k, ps in groups.items() if k[1] == "cuda-core"},
                              priors, factors, {}, near=taus)
        plain = _assemble(fitted, groups, priors, factors)
        e_u = {d: plain.class_fractions(d, "cuda-core").e_c for d, _ in groups}
        if classes and given is None and r == 1:  # once the priors have settled
            factors = {c: _fit_factors(groups, priors, c, e_u, taus)
                       for c in FACTOR_FIT_CLASSES}
        fitted.update(_fit_machine({k: ps for k, ps in groups.items() if k[1] != "cuda-core"},
                                   priors, factors, e_u, near=taus))
        priors = {c: _geomean([v[:2] for k, v in fitted.items() if k[1] == c], priors[c])
                  for c in priors}
    return _assemble(fitted, groups, priors, factors)


def _assemble(fitted: dict, groups: dict, priors: dict, factors: dict) -> Fit:
    devices = {k: DeviceFit(v[0], v[1], len(groups[k]), k[0], v[3], v[4], v[5])
               for k, v in fitted.items()}
    return Fit(devices, {c: DeviceFit(*v, 0) for c, v in priors.items()},
               groups={k: frozenset(p.group for p in ps) for k, ps in groups.items()},
               factors={c: f for c, f in factors.items() if f})


def predict_step_s(p: RefPoint, f: Fit) -> float:
    """Absolute roofline step time of point ``p``'s workload on its device under ``f``."""
    fr = f.fractions(p.device, p.precision)
    return float(f.curve(p)(fr.e_c, fr.e_m))
