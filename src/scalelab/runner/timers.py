"""Per-phase step timers and the statistics run.json reports.

A :class:`StepTimer` records, for each training step, how long each named phase took
(``data_s``, ``compute_s``, ``push_s``, ...). Code is instrumented with
``with maybe_phase(timer, "push_s"):``; with ``timer=None`` that is a shared no-op context
(no clock read, no allocation), so instrumentation that is off costs nothing.

On a GPU the runner gives the timer a :class:`DeviceClock`: each phase boundary is a CUDA
event on the stream the step runs on, read a step later, so timing adds no synchronization
that untimed training would not have. On the CPU the clock is the host's.

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

from scalelab.theory.band import quantile

_NULL = contextlib.nullcontext()


class HostClock:
    """The host's clock: a mark is ``time.perf_counter()``, read at once."""

    deferred = False

    def mark(self) -> float:
        return time.perf_counter()

    @staticmethod
    def elapsed(a: float, b: float) -> float:
        return b - a

    @staticmethod
    def wait(mark: float) -> None:
        return None


class DeviceClock:
    """A GPU's clock: a mark is a CUDA event recorded on the current stream.

    A phase between two marks is the time the *device's* stream spent from one to the other:
    its kernels and copies, and the gaps where it waited for the host (a mark is reached no
    earlier than the host queued it). Nothing synchronizes while training; the marks of a
    step are read once its last one has completed, which the runner asks for one step later
    (:func:`scalelab.runner.entry`'s step loop), when the device is already busy with the
    next step. ``events`` is ``torch.cuda.Event`` (passed in, so this module needs no torch).
    """

    deferred = True

    def __init__(self, event_type):
        self._event = event_type

    def mark(self):
        ev = self._event(enable_timing=True)
        ev.record()
        return ev

    @staticmethod
    def elapsed(a, b) -> float:
        return a.elapsed_time(b) / 1e3

    @staticmethod
    def wait(mark) -> None:
        mark.synchronize()


HOST_CLOCK = HostClock()


class StepTimer:
    """One step's phases on a clock (the host's by default).

    ``after``: the previous step's timer; on a device clock this step then starts where that
    one ended (its last mark), so idle time between steps is in some step, not in none.
    """

    def __init__(self, clock=None, after: StepTimer | None = None):
        self.steps: list[dict[str, float]] = []
        self._current: dict[str, float] | None = None
        self.clock = clock or HOST_CLOCK
        self._after = after
        self._spans: list[tuple[str, object, object]] = []
        self._t0 = self._t1 = None

    def _now(self):
        return self.clock.mark()

    def start_step(self) -> None:
        self._current = {}
        self._spans = []
        prev = self._after._t1 if self._after is not None else None
        self._t0 = prev if (prev is not None and self.clock.deferred) else self._now()
        self._after = None  # keep no chain of timers alive
        self._cpu0 = time.process_time()

    def stop(self) -> None:
        """Mark the end of the step (nothing is read yet on a device clock)."""
        assert self._current is not None
        self._t1 = self._now()
        self._current["cpu_s"] = time.process_time() - self._cpu0

    def record(self) -> dict[str, float]:
        """The step's phases in seconds; on a device clock waits for the step's last mark."""
        assert self._current is not None and self._t1 is not None
        self.clock.wait(self._t1)
        for name, a, b in self._spans:
            self._current[name] = self._current.get(name, 0.0) + self.clock.elapsed(a, b)
        self._spans = []
        self._current["step_s"] = self.clock.elapsed(self._t0, self._t1)
        done, self._current = self._current, None
        self.steps.append(done)
        return done

    def end_step(self) -> dict[str, float]:
        self.stop()
        return self.record()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t = self._now()
        try:
            yield
        finally:
            assert self._current is not None
            self._spans.append((name, t, self._now()))

    def add(self, name: str, seconds: float) -> None:
        assert self._current is not None
        self._current[name] = self._current.get(name, 0.0) + seconds


def maybe_phase(timer: StepTimer | None, name: str):
    """``timer.phase(name)``, or a no-op context when timing is off."""
    return _NULL if timer is None else timer.phase(name)


def summarize(values: list[float]) -> dict[str, float] | None:
    """``{median, p10, p90, spread, n}``; ``spread`` is p90 - p10. None for no values."""
    vals = sorted(float(v) for v in values)
    if not vals:
        return None
    p10, p90 = quantile(vals, 0.1), quantile(vals, 0.9)
    return {"median": statistics.median(vals), "p10": p10, "p90": p90,
            "spread": p90 - p10, "n": len(vals)}
