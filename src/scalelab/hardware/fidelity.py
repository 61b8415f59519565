"""How well the cross-device estimate predicts published measurements it was not fitted to.

For every pair of held-out points in one group (one software stack and benchmark), same
model, same precision class, different devices: take the source's measured step time,
estimate the target's with :func:`scalelab.hardware.estimate.estimate_step`, and compare
with the target's measured throughput. Two fits:

- ``"fit"``: the packaged reference fit (the held-out points are not in it);
- ``"lodo"``: leave one device out, a fit without any reference point of the target device
  or of a device with the same peaks and bandwidth, as for a device nobody has measured.

Leave one model out (:func:`leave_one_model_out`): every model of the reference table in
turn is left out of the fit (all its points, and the operation classes' factors refitted
without it); its points on devices the fit still has in that fit class are predicted by the
roofline alone (no measurement to anchor to), with the host's floor. A point whose
prediction is the host's time is "host-bound"; the two kinds of step are summarized apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scalelab import hardware
from scalelab.hardware.bands import bands, models_left_out
from scalelab.hardware.estimate import estimate_step
from scalelab.hardware.fit import (
    fit,
    precision_class,
    twin_key,
)
from scalelab.hardware.reference import RefPoint, reference

MODES = ("fit", "lodo")


@dataclass(frozen=True)
class PairResult:
    source: RefPoint
    target: RefPoint
    predicted_samples_per_s: float
    band: float

    @property
    def error(self) -> float:
        """predicted / measured - 1 (throughput)."""
        return self.predicted_samples_per_s / self.target.samples_per_s - 1.0


def _pairs(points: Sequence[RefPoint]):
    for s in points:
        for t in points:
            if (s.group == t.group and s.model == t.model and s.device != t.device
                    and s.input_shape == t.input_shape
                    and precision_class(s.precision) == precision_class(t.precision)):
                yield s, t


def _fit_without(device: str):
    twin = twin_key(hardware.device(device))
    keep = tuple(p for p in reference().points
                 if twin_key(hardware.device(p.device)) != twin)
    return fit(keep)


def cross_device(points: Sequence[RefPoint], mode: str = "fit") -> list[PairResult]:
    """Every same-group pair of ``points``, predicted from its source to its target."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    out = []
    held: dict[str, tuple] = {}  # one refit per device left out, not one per pair
    for s, t in _pairs(points):
        if mode == "fit":
            f, b = fit(), bands()
        else:
            if t.device not in held:
                held[t.device] = (_fit_without(t.device), bands().without(t.device))
            f, b = held[t.device]
        est = estimate_step(t.ops(), t.device, t.precision,
                            source_device=s.device, source_step_s=s.step_s,
                            source_ops=s.ops(),
                            source_precision=s.precision, f=f, b=b)
        out.append(PairResult(s, t, t.batch / est.step_s, est.band))
    return out


def summary(results: Sequence[PairResult]) -> tuple[float, float]:
    """(median |error|, max |error|) over ``results``."""
    errs = sorted(abs(r.error) for r in results)
    if not errs:
        raise ValueError("no pairs to summarize")
    n = len(errs)
    median = errs[n // 2] if n % 2 else (errs[n // 2 - 1] + errs[n // 2]) / 2
    return median, errs[-1]


@dataclass(frozen=True)
class ModelResult:
    point: RefPoint
    predicted_step_s: float
    host_bound: bool  # the prediction is the host's time to issue the operations

    @property
    def error(self) -> float:
        """predicted / measured - 1 (step time)."""
        return self.predicted_step_s / self.point.step_s - 1.0


def leave_one_model_out(points: Sequence[RefPoint] | None = None) -> list[ModelResult]:
    """Each model's points predicted by a fit that never saw the model (see the module)."""
    pts = tuple(reference().points if points is None else points)
    return [ModelResult(p, step, host) for p, step, host in models_left_out(pts)]


def error_summary(errors: Sequence[float]) -> tuple[float, float]:
    """(median |e|, max |e|) of relative errors."""
    errs = sorted(abs(e) for e in errors)
    if not errs:
        raise ValueError("no errors to summarize")
    n = len(errs)
    return (errs[n // 2] if n % 2 else (errs[n // 2 - 1] + errs[n // 2]) / 2), errs[-1]
