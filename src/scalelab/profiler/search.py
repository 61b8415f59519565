"""Minibatch search: the largest batch that fits, and the batch worth using.

Both are pure functions over a trial callback, so they can be tested with a fake memory
model and reused on any device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scalelab.theory import memory


@dataclass(frozen=True)
class Probe:
    """What one trial of a batch said: fits the budget, its peak, whether it trained at all."""

    fits: bool
    peak_bytes: int | None = None
    trains: bool = True


@dataclass(frozen=True)
class SearchResult:
    max_fit: int | None       # largest batch seen to fit (None: none did)
    first_fail: int | None    # smallest batch seen not to fit (None: the cap was reached)
    tried: tuple[int, ...]    # batch sizes tried, in order
    untrainable: tuple[int, ...] = ()  # batches at which the model does not train


def memory_guess(points: dict[int, int], budget_bytes: int | None) -> int | None:
    """The largest batch whose memory fits ``budget_bytes`` on the line through the two
    largest measured batches (None without a budget, two points or a growing memory).

    Memory = fixed (weights, gradients, optimizer state, workspace) + per-sample
    (activations) x b; the two largest points see the per-sample part best, since the
    fixed part and the allocator's rounding dominate small batches.
    """
    if budget_bytes is None or len(points) < 2:
        return None
    (b1, m1), (b2, m2) = sorted(points.items())[-2:]
    per_sample = (m2 - m1) / (b2 - b1)
    if per_sample <= 0:
        return None
    return b2 + int((budget_bytes - m2) // per_sample)


class _Search:
    """State of one search: the bracket lo (fits) < hi (does not), the measured points."""

    def __init__(self, probe, budget_bytes, cap, max_trials):
        self.probe, self.budget_bytes = probe, budget_bytes
        self.cap, self.max_trials = cap, max_trials
        self.tried: list[int] = []
        self.untrainable: list[int] = []
        self.points: dict[int, int] = {}
        self.lo: int | None = None
        self.hi: int | None = None

    def left(self) -> int:
        return self.max_trials - len(self.tried)

    def check(self, b: int) -> bool | None:
        """Try ``b``: True fits, False does not, None the model does not train at ``b``."""
        r = self.probe(b)
        r = Probe(bool(r)) if isinstance(r, bool) else r
        self.tried.append(b)
        if not r.trains:
            self.untrainable.append(b)
            return None
        if r.fits and r.peak_bytes:
            self.points[b] = int(r.peak_bytes)
        if r.fits:
            self.lo = b if self.lo is None else max(self.lo, b)
        else:
            self.hi = b if self.hi is None else min(self.hi, b)
        return r.fits

    def result(self) -> SearchResult:
        return SearchResult(self.lo, self.hi, tuple(self.tried), tuple(self.untrainable))


def find_max_batch(
    fits: Callable[[int], bool | Probe],
    start: int = 1,
    cap: int = 1024,
    max_trials: int = 16,
    budget_bytes: int | None = None,
    reserve: int = 6,
    keep_doubling: Callable[[], bool] | None = None,
) -> SearchResult:
    """The largest batch that fits: a doubling ladder, a jump with the memory fit, bisection.

    1. From ``start``, batches at which the model does not train (``Probe.trains`` False,
       e.g. BatchNorm at batch 1) are passed over: the ladder goes on from the next size.
    2. Ladder: double while ``keep_doubling()`` (the caller still wants rungs, e.g. while
       throughput grows) or no memory fit exists yet, but never into the last ``reserve``
       trials, which are held back for the steps below.
    3. Jump: with two measured peaks and ``budget_bytes``, try the batch the memory line
       (:func:`memory_guess`) says is the largest that fits. Memory is about linear in the
       batch, so the guess lands at or next to the limit, and the next trial brackets it.
    4. Refine: once a batch that does not fit is known, bisect the bracket; a new measured
       peak gives a new guess, tried once before bisection goes on (a guess that does not
       fit adds no point, so bisection, which halves the bracket, follows it). While no
       batch has failed, guesses that fit move up at least 1, 2, 4, ... past the last one.

    Without ``budget_bytes`` (or peaks) this is doubling then bisection. Stops after
    ``max_trials`` calls of ``fits``; the answer is then the largest batch known to fit.
    """
    if start < 1 or cap < start or max_trials < 1 or reserve < 0:
        raise ValueError(f"need 1 <= start <= cap, max_trials >= 1 and reserve >= 0, got "
                         f"{start}, {cap}, {max_trials}, {reserve}")
    s = _Search(fits, budget_bytes, cap, max_trials)
    pos = start
    while s.check(pos) is None:
        if pos >= cap or s.left() < 1:
            return s.result()
        pos = min(pos * 2, cap)
    if s.lo is None:
        return s.result()
    _climb(s, pos, reserve, keep_doubling)
    return s.result()


def _climb(s: _Search, pos: int, reserve: int, keep_doubling) -> None:
    guessed_points, gap, bisect_next = -1, 0, False
    while s.left() > 0:
        if (s.hi is not None and s.hi - s.lo <= 1) or (s.hi is None and s.lo >= s.cap):
            return
        upper = s.cap if s.hi is None else s.hi - 1
        guess = memory_guess(s.points, s.budget_bytes)
        fresh = guess is not None and len(s.points) != guessed_points and not bisect_next
        wants_rung = keep_doubling() if keep_doubling is not None else guess is None
        if s.hi is None and (wants_rung or not fresh) and s.left() > reserve:
            nxt, kind = min(pos * 2, s.cap), "rung"
        elif fresh:
            nxt = max(guess, s.lo + gap) if s.hi is None else guess
            nxt, kind = min(max(nxt, s.lo + 1), upper), "guess"
            guessed_points = len(s.points)
        elif s.hi is None:
            nxt, kind = min(max(pos, s.lo) * 2, s.cap), "rung"
        else:
            nxt, kind = (s.lo + s.hi) // 2, "bisect"
        width = (s.hi or 0) - s.lo
        ok = s.check(nxt)
        pos = max(pos, nxt)
        if ok is None and s.hi is None and nxt < s.cap:
            continue  # does not train at this rung: the ladder goes on past it
        if ok is None:
            s.hi = min(s.hi or nxt, nxt)  # keep the search below batches that do not train
        if kind == "guess" and ok and s.hi is None:
            gap = max(1, 2 * gap)
        bisect_next = kind == "guess" and s.hi is not None and (s.hi - s.lo) * 2 > width > 0


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
    """Least-squares ``y = intercept + per_sample * x`` as profile.json's ``fit`` entries
    (:func:`scalelab.theory.memory.linear_fit`)."""
    intercept, per_sample = memory.linear_fit(xs, ys)
    return {"intercept": intercept, "per_sample": per_sample}
