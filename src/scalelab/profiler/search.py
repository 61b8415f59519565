"""Minibatch search: the largest batch that fits, and the batch worth using.

Both are pure functions over a trial callback, so they can be tested with a fake memory
model and reused on any device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SearchResult:
    max_fit: int | None       # largest batch seen to fit (None: not even the first)
    first_fail: int | None    # smallest batch seen not to fit (None: the cap was reached)
    tried: tuple[int, ...]    # batch sizes tried, in order


def find_max_batch(
    fits: Callable[[int], bool], start: int = 1, cap: int = 1024, max_trials: int = 12
) -> SearchResult:
    """Double from ``start`` until a batch does not fit or ``cap``, then bisect.

    Memory grows monotonically with the batch, so after doubling brackets the limit between
    ``lo`` (fits) and ``hi`` (does not), bisection halves the bracket each trial. Stops after
    ``max_trials`` calls of ``fits``; the answer is then the largest batch known to fit.
    """
    if start < 1 or cap < start or max_trials < 1:
        raise ValueError(f"need 1 <= start <= cap and max_trials >= 1, got {start}, {cap}, "
                         f"{max_trials}")
    tried: list[int] = []

    def check(b: int) -> bool:
        tried.append(b)
        return fits(b)

    if not check(start):
        return SearchResult(None, start, tuple(tried))
    lo, hi = start, None
    while hi is None and len(tried) < max_trials:
        nxt = min(lo * 2, cap)
        if nxt == lo:
            break
        if check(nxt):
            lo = nxt
        else:
            hi = nxt
    while hi is not None and hi - lo > 1 and len(tried) < max_trials:
        mid = (lo + hi) // 2
        if check(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(lo, hi, tuple(tried))


def recommend_batch(samples_per_s: dict[int, float], tolerance: float = 0.05) -> int:
    """The smallest measured batch within ``tolerance`` of the best measured throughput.

    Larger batches than that buy almost no speed but cost memory and, in data-parallel
    training, a larger global batch (which needs learning-rate retuning).
    """
    if not samples_per_s:
        raise ValueError("no measured batch")
    best = max(samples_per_s.values())
    return min(b for b, s in samples_per_s.items() if s >= (1 - tolerance) * best)


def linear_fit(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least-squares ``y = intercept + per_sample * x``."""
    n = len(xs)
    if n == 0:
        return {"intercept": 0.0, "per_sample": 0.0}
    if n == 1 or len(set(xs)) == 1:
        return {"intercept": 0.0, "per_sample": ys[0] / xs[0] if xs[0] else 0.0}
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return {"intercept": my - slope * mx, "per_sample": slope}
