"""Per-phase step timers and their summaries.

A :class:`StepTimer` records, per step, the seconds spent in named phases (``data_s``,
``compute_s``, ``push_s``, ``apply_s``, ``pull_s``) and the whole ``step_s``.
:func:`maybe_phase` times a block when given a timer and costs nothing (yields ``None``)
when given ``None``.
"""

from __future__ import annotations

import statistics
from contextlib import contextmanager
from time import perf_counter

PHASES = ("data_s", "compute_s", "push_s", "apply_s", "pull_s", "step_s")


class StepTimer:
    def __init__(self):
        self.steps: list[dict] = []
        self.current: dict | None = None
        self._t0 = 0.0

    def start(self, step: int) -> None:
        self.current = {"step": step}
        self._t0 = perf_counter()

    def add(self, name: str, seconds: float) -> None:
        self.current[name] = self.current.get(name, 0.0) + seconds

    @contextmanager
    def phase(self, name: str):
        t = perf_counter()
        try:
            yield self
        finally:
            self.add(name, perf_counter() - t)

    def finish(self, **extra) -> dict:
        self.current["step_s"] = perf_counter() - self._t0
        self.current.update(extra)
        self.steps.append(self.current)
        done, self.current = self.current, None
        return done


@contextmanager
def maybe_phase(timer: StepTimer | None, name: str):
    """Time the block into ``timer[name]``; a no-op yielding ``None`` without a timer."""
    if timer is None:
        yield None
        return
    with timer.phase(name):
        yield timer


def spread_of(values: list[float]) -> dict | None:
    """Median, p10, p90 and spread (p90 - p10) of ``values``; ``None`` when empty."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    if len(vals) == 1:
        p10 = p90 = vals[0]
    else:
        q = statistics.quantiles(vals, n=10, method="inclusive")
        p10, p90 = q[0], q[-1]
    return {"median": statistics.median(vals), "p10": p10, "p90": p90,
            "spread": p90 - p10, "n": len(vals)}
