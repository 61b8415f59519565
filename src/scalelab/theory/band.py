"""Prediction bands from a model's relative errors on measured cases.

A case's log error is ``r = log(T_pred / T_meas)``, so ``T_meas = T_pred exp(-r)``. Over a
set of cases the model was not fitted on (held out), the measured step lay between
``T_pred exp(-max r)`` and ``T_pred exp(-min r)``; the band carries those two factors to new
predictions: ``[T_pred * low, T_pred * high]`` with ``low = exp(-max r)`` and
``high = exp(-min r)``. Throughput is ``G b / T`` (:func:`scalelab.theory.amdahl
.weak_throughput`), so its band is ``[X_pred / high, X_pred / low]``.

The band always contains the prediction itself (``low <= 1 <= high``). With n held-out
cases drawn like the new one, the range of n errors covers a new error with probability
``(n - 1)/(n + 1)`` (order statistics), so few cases give a band that is honest but wide
only as far as those cases went; the number of cases is kept with the band.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ErrorBand:
    """Multiplicative band on a predicted time: measured within [low, high] x predicted."""

    low: float
    """Smallest measured/predicted ratio seen (<= 1)."""
    high: float
    """Largest measured/predicted ratio seen (>= 1)."""
    cases: int
    """Held-out cases the band was taken from."""
    source: str = ""
    """Which errors: the calibrated model's held-out ones, or the uncalibrated model's."""

    def __post_init__(self):
        if not 0 < self.low <= 1 <= self.high or not math.isfinite(self.high):
            raise ValueError(f"a band needs 0 < low <= 1 <= high, got low {self.low}, "
                             f"high {self.high}")
        if self.cases < 0:
            raise ValueError(f"band cases must be >= 0, got {self.cases}")

    @property
    def coverage(self) -> float:
        """(n - 1)/(n + 1): chance a new case's error falls inside the range of n errors."""
        n = self.cases
        return (n - 1) / (n + 1) if n >= 1 else 0.0

    def time_s(self, predicted_s: float) -> tuple[float, float]:
        """Band of a predicted time, seconds: (predicted x low, predicted x high)."""
        return predicted_s * self.low, predicted_s * self.high

    def rate(self, predicted_per_s: float) -> tuple[float, float]:
        """Band of a predicted rate (samples/s), the inverse of time: (x / high, x / low)."""
        return predicted_per_s / self.high, predicted_per_s / self.low

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "coverage": self.coverage}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ErrorBand:
        return cls(float(d["low"]), float(d["high"]), int(d["cases"]), str(d.get("source", "")))


def quantile(values, q: float) -> float:
    """The ``q`` quantile of ``values`` (0 <= q <= 1), linear between order statistics: at
    position ``q (n - 1)`` of the sorted values (numpy's default, ``statistics.quantiles``'
    ``inclusive`` method)."""
    v = sorted(values)
    if not v:
        raise ValueError("the quantile of no values")
    pos = q * (len(v) - 1)
    i = int(pos)
    return v[i] if i + 1 >= len(v) else v[i] + (pos - i) * (v[i + 1] - v[i])


def band_from_log_errors(log_errors: list[float], source: str = "") -> ErrorBand:
    """``low = exp(-max r)``, ``high = exp(-min r)`` over ``r = log(pred/meas)``, around 1."""
    if not log_errors:
        return ErrorBand(1.0, 1.0, 0, source)
    low = min(1.0, math.exp(-max(log_errors)))
    high = max(1.0, math.exp(-min(log_errors)))
    return ErrorBand(low, high, len(log_errors), source)


def relative_band(band: float, source: str = "") -> ErrorBand:
    """A symmetric relative band ``+-b`` as a multiplicative one: ``[1 - b, 1 + b]``."""
    if not 0 <= band < 1:
        raise ValueError(f"a relative band must be in [0, 1), got {band}")
    return ErrorBand(1.0 - band, 1.0 + band, 0, source)


def combine(a: ErrorBand | None, b: ErrorBand | None) -> ErrorBand | None:
    """Two independent multiplicative errors on one prediction: the factors multiply,
    ``[low_a low_b, high_a high_b]`` (the widest the pair can make it)."""
    if a is None or b is None:
        return a or b
    return ErrorBand(a.low * b.low, a.high * b.high, min(a.cases, b.cases) or
                     max(a.cases, b.cases), "; ".join(x for x in (a.source, b.source) if x))
