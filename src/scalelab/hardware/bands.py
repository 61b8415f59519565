"""Error bands of the reference fit (:mod:`scalelab.hardware.fit`), from leave-out errors.

Two ways of leaving out, two kinds of miss. Leave one point out (each point predicted by a
fit without it) shows how far a device's measurement lands from the rest of the table: the
spread between devices and software releases. Leave one model out (every model's points
predicted by a fit without any point of that model) shows how far a model the fit has not
seen lands on a device it has: what a plan for a user's own network faces. A fitted
device's band is, per fit class, the larger of the two 80th percentiles (the model's only
where the class has :data:`MIN_MODEL_CASES` such deviations: a class whose devices measured
one network, e.g. ResNet-50, has none). A device without points of its own in a class gets
the largest deviation either way shows; steps the host sets (the prediction on the floor) a
band of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from scalelab import hardware
from scalelab.hardware.fit import fit, fit_class, predict_step_s, twin_key
from scalelab.hardware.reference import RefPoint, reference
from scalelab.theory.band import quantile


@dataclass(frozen=True)
class Bands:
    """Relative error bands of the fit, per fit class, from leave-out deviations.

    A device with its own points in that class gets the larger 80th percentile of the
    class's leave-one-point-out and leave-one-model-out deviations (so about four misses in
    five of either kind fall inside it); a device without them gets the class's largest
    deviation.
    """

    seen: dict[str, float]  # fit class -> band for a device fitted in that class
    unseen: dict[str, float]  # fit class -> band for a device that is not
    fitted: frozenset  # (device, fit class) pairs with points
    host: float = 0.0  # band of a step the host sets: the largest deviation of such points
    host_cases: int = 0  # left-out predictions that were the host's time
    # fit class -> its leave-one-model-out deviations (fewer than MIN_MODEL_CASES: the
    # class's band is its leave-one-point-out one alone)
    model_cases: dict[str, int] = field(default_factory=dict)

    def band(self, device: str, precision: str, host_bound: bool = False) -> float:
        """The band of ``device`` at ``precision``; a step the host sets gets the host's
        band when the table has such points (else its class's)."""
        if host_bound and self.host_cases:
            return self.host
        cls = fit_class(device, precision)
        twin = twin_key(hardware.device(device))
        seen = any(c == cls and twin_key(hardware.device(d)) == twin for d, c in self.fitted)
        return (self.seen if seen else self.unseen).get(cls, max(self.unseen.values(),
                                                                 default=1.0))

    def without(self, device: str) -> Bands:
        """The bands as if ``device`` (and its same-chip twins) had no reference points."""
        twin = twin_key(hardware.device(device))
        return replace(self, fitted=frozenset(
            (d, c) for d, c in self.fitted if twin_key(hardware.device(d)) != twin))


SEEN_QUANTILE = 0.8  # a fitted device's band covers this share of its class's deviations
MIN_MODEL_CASES = 5  # leave-one-model-out deviations a class needs to set its band


def _predicted(p: RefPoint, f) -> tuple[float, bool]:
    """(point ``p``'s step predicted by fit ``f``, whether that is the host's time)."""
    step = predict_step_s(p, f)
    return step, step <= f.curve(p).floor_s * (1 + 1e-12)


def _deviation(p: RefPoint, step: float) -> float:
    """|T_measured / T_predicted - 1|: what a band laid around the prediction must cover."""
    return abs(p.step_s / step - 1.0)


def models_left_out(points: Sequence[RefPoint], factors: dict | None = None
                    ) -> list[tuple[RefPoint, float, bool]]:
    """[(point, predicted step, whether it is the host's time)]: every model's points on
    the devices that keep points in the point's fit class, each predicted by a fit without
    any point of that model (the operation classes' factors refitted, or ``factors``)."""
    out = []
    for model in sorted({p.model for p in points}):
        rest = tuple(p for p in points if p.model != model)
        kept = {(p.device, fit_class(p.device, p.precision)) for p in rest}
        f = fit(rest, factors=factors)
        out += [(p, *_predicted(p, f)) for p in points
                if p.model == model and (p.device, fit_class(p.device, p.precision)) in kept]
    return out


@lru_cache(maxsize=1)
def bands() -> Bands:
    """Leave-out deviations of the packaged reference fit, summarized per fit class.

    Leave one model out: each model's points predicted by a fit without any of its points,
    on the devices that keep points in the point's class. Leave one point out: each point
    predicted by a fit without it; a device whose only point in a class is left out falls
    back to a same-chip device or to the class's pooled fractions (not to its generation's),
    so these measure how far devices' fractions spread around the class. Both keep the
    operation classes' factors of the whole table, and neither says how much a device pair's
    ratio moves between software releases.

    A fitted device's band: the larger of the :data:`SEEN_QUANTILE` quantiles of its class's
    leave-one-point-out and (where there are :data:`MIN_MODEL_CASES` of them)
    leave-one-model-out deviations; an unfitted device's: the largest of either. Points whose
    prediction is the host's time (the floor) give the band of a step the host sets.

    A band is laid around the prediction (the step is within T x (1 +- band)), so the
    deviation it must cover is the measurement's from the prediction, |T_measured / T - 1|,
    not the error as reported, T / T_measured - 1 (a prediction 10% short needs 11%).
    """
    points = reference().points
    full = fit(points)
    host = []
    by_point: dict[str, list[float]] = {}
    by_model: dict[str, list[float]] = {}
    for i, p in enumerate(points):
        f = replace(fit(points[:i] + points[i + 1:], factors=full.factors),
                    by_generation=False)
        step, on_floor = _predicted(p, f)
        by_point.setdefault(fit_class(p.device, p.precision), []).append(_deviation(p, step))
        if on_floor:
            host.append(_deviation(p, step))
    for p, step, on_floor in models_left_out(points, full.factors):
        by_model.setdefault(fit_class(p.device, p.precision), []).append(_deviation(p, step))
        if on_floor:
            host.append(_deviation(p, step))
    seen = {c: max(quantile(v, SEEN_QUANTILE),
                   quantile(by_model[c], SEEN_QUANTILE)
                   if len(by_model.get(c, ())) >= MIN_MODEL_CASES else 0.0)
            for c, v in by_point.items()}
    unseen = {c: max(v + by_model.get(c, [])) for c, v in by_point.items()}
    fitted = frozenset((p.device, fit_class(p.device, p.precision)) for p in points)
    return Bands(seen, unseen, fitted, max(host, default=0.0), len(host),
                 {c: len(v) for c, v in by_model.items()})
