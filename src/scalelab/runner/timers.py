"""Per-phase step timers and the statistics run.json reports.

A :class:`StepTimer` records, for each training step, how long each named phase took
(``data_s``, ``compute_s``, ``push_s``, ...). Code is instrumented with
``with maybe_phase(timer, "push_s"):``; with ``timer=None`` that is a shared no-op context
(no clock read, no allocation), so instrumentation that is off costs nothing.

On a GPU the runner gives the timer ``sync=torch.cuda.synchronize``: every clock read (each
phase boundary) first waits for the device, so a phase ends when its kernels and copies do,
not when they were queued.

Every step also records ``cpu_s``: the CPU time the whole process (all its threads, the
transport's included) used during the step. Beside ``step_s`` it tells whether a rank was
busy or waiting, and summed over the ranks of one host, how many of its cores the job kept
busy.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator

_NULL = contextlib.nullcontext()


class StepTimer:
    def __init__(self, sync=None):
        self.steps: list[dict[str, float]] = []
        self._current: dict[str, float] | None = None
        self._sync = sync  # e.g. torch.cuda.synchronize, called before each clock read

    def _now(self) -> float:
        if self._sync is not None:
            self._sync()
        return time.perf_counter()

    def start_step(self) -> None:
        self._current = {}
        self._t0 = self._now()
        self._cpu0 = time.process_time()

    def end_step(self) -> dict[str, float]:
        assert self._current is not None
        self._current["step_s"] = self._now() - self._t0
        self._current["cpu_s"] = time.process_time() - self._cpu0
        done, self._current = self._current, None
        self.steps.append(done)
        return done

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t = self._now()
        try:
            yield
        finally:
            assert self._current is not None
            self._current[name] = self._current.get(name, 0.0) + self._now() - t

    def add(self, name: str, seconds: float) -> None:
        assert self._current is not None
        self._current[name] = self._current.get(name, 0.0) + seconds


def maybe_phase(timer: StepTimer | None, name: str):
    """``timer.phase(name)``, or a no-op context when timing is off."""
    return _NULL if timer is None else timer.phase(name)


def _quantile(sorted_values: list[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(values: list[float]) -> dict[str, float] | None:
    """``{median, p10, p90, spread, n}``; ``spread`` is p90 - p10. None for no values."""
    vals = sorted(float(v) for v in values)
    if not vals:
        return None
    p10, p90 = _quantile(vals, 0.1), _quantile(vals, 0.9)
    return {"median": statistics.median(vals), "p10": p10, "p90": p90,
            "spread": p90 - p10, "n": len(vals)}
