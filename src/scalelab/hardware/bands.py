"""Error bands of the reference fit (:mod:`scalelab.hardware.fit`), from leave-one-out.

Each reference point is left out in turn and predicted by a fit without it; per fit class,
a device with its own points in the class gets the 80th percentile of the class's |errors|,
a device without them the largest, and steps the host sets (the prediction on the floor)
a band of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from scalelab import hardware
from scalelab.hardware.fit import fit, fit_class, predict_step_s, twin_key
from scalelab.hardware.reference import reference
from scalelab.theory.band import quantile


@dataclass(frozen=True)
class Bands:
    """Relative error bands of the fit, per fit class, from leave-one-out errors.

    A device with its own points in that class gets the 80th percentile of the class's
    |LOO errors| (so about four misses in five fall inside it); a device without them gets
    the class's largest |LOO error| (the worst miss when a device's point was left out).
    """

    seen: dict[str, float]  # fit class -> band for a device fitted in that class
    unseen: dict[str, float]  # fit class -> band for a device that is not
    fitted: frozenset  # (device, fit class) pairs with points
    host: float = 0.0  # band of a step the host sets: the largest |LOO error| of such points
    host_cases: int = 0  # points whose left-out prediction was the host's time

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


SEEN_QUANTILE = 0.8  # a fitted device's band covers this share of its class's LOO errors


@lru_cache(maxsize=1)
def bands() -> Bands:
    """Leave-one-out errors of the packaged reference fit, summarized per fit class.

    Each point is predicted by a fit without it (the operation classes' factors kept as the
    whole table's); a device whose only point in a class is
    left out falls back to a same-chip device or to the class's pooled fractions (not to its
    generation's), so these errors measure how far devices' fractions spread around the
    class; they do not say how much a device pair's ratio moves between software releases.
    Points whose prediction is the host's time (the floor) give the band
    of a step the host sets, their own.

    A band is laid around the prediction (the step is within T x (1 +- band)), so the
    deviation it must cover is the measurement's from the prediction, |T_measured / T - 1|,
    not the error as reported, T / T_measured - 1 (a prediction 10% short needs 11%).
    """
    points = reference().points
    full = fit(points)
    host = []
    by_class: dict[str, list[float]] = {}
    for i, p in enumerate(points):
        f = replace(fit(points[:i] + points[i + 1:], factors=full.factors),
                    by_generation=False)
        step = predict_step_s(p, f)
        deviation = abs(p.step_s / step - 1.0)
        by_class.setdefault(fit_class(p.device, p.precision), []).append(deviation)
        if step <= f.curve(p).floor_s * (1 + 1e-12):
            host.append(deviation)
    seen = {c: quantile(v, SEEN_QUANTILE) for c, v in by_class.items()}
    unseen = {c: max(v) for c, v in by_class.items()}
    fitted = frozenset((p.device, fit_class(p.device, p.precision)) for p in points)
    return Bands(seen, unseen, fitted, max(host, default=0.0), len(host))
