"""What a long command shows while it works: trial k of n, the time spent, the time left.

The profiler (and ``advise``, which profiles first) reports each step it starts as a line of
text (``timing batch 8``, ``memory probe at batch 512``, ``trying bf16_autocast at batch
16``, ...). :class:`TrialProgress` counts the trials among them against an expected count
(:func:`expected_trials`, raised when the search runs longer) and the time left is the
mean time of a trial so far times the trials still expected. Where the output is not a
terminal each trial is one line (``progress: trial 3 of 9, timing batch 8, 0:42 elapsed,
about 1:24 left``); on a terminal, a bar with the same figures (:func:`bar`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

#: the beginnings of the profiler's messages that start a trial
TRIAL_WORDS = ("timing batch", "memory probe", "trying ", "timing the input", "timing the host")


def expected_trials(batch_sizes: str | list | tuple, max_batch: int, algorithms: int,
                    io: bool) -> int:
    """The trials a profile is expected to run: one per listed batch (an automatic search
    doubles from 1 to ``max_batch``: log2 of it plus one, and two probes past the plateau),
    one per computation configuration besides the default, one for the input pipeline
    (``io``), one for the host's time per operation."""
    if isinstance(batch_sizes, str):
        batches = int(math.log2(max(1, max_batch))) + 3
    else:
        batches = len(batch_sizes)
    return batches + max(0, algorithms - 1) + (1 if io else 0) + 1


def clock_text(s: float) -> str:
    """Seconds as m:ss (h:mm:ss past an hour)."""
    s = max(0, int(round(s)))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class TrialProgress:
    """Counts trials from the profiler's messages; ``emit`` gets one line per trial."""

    def __init__(self, expected: int, emit: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, label: str = "progress"):
        self.expected = max(1, int(expected))
        self.emit = emit
        self.clock = clock
        self.label = label
        self.start = clock()
        self.trials = 0
        self.text = "starting"

    @property
    def total(self) -> int:
        """Trials expected, never fewer than those started (the search ran longer)."""
        return max(self.expected, self.trials)

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.start

    @property
    def left_s(self) -> float | None:
        """Time left: the mean finished trial's time x the trials still expected."""
        done = self.trials - 1
        if done < 1:
            return None
        return self.elapsed_s / done * (self.total - done)

    def line(self) -> str:
        left = self.left_s
        return (f"{self.label}: trial {self.trials} of {self.total}, {self.text}, "
                f"{clock_text(self.elapsed_s)} elapsed"
                + (f", about {clock_text(left)} left" if left is not None else ""))

    def __call__(self, text: str) -> None:
        self.text = text
        if text.startswith(TRIAL_WORDS):
            self.trials += 1
            if self.emit is not None:
                self.emit(self.line())


def bar(console, expected: int, label: str):
    """A rich progress bar fed by the profiler's messages: ``with bar(...) as say``."""
    from contextlib import contextmanager

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    @contextmanager
    def run():
        with Progress(TextColumn(f"[bold]{label}[/bold]"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.description}"), TimeElapsedColumn(),
                      TextColumn("left"), TimeRemainingColumn(), console=console,
                      transient=True) as p:
            task = p.add_task("starting", total=expected)
            counter = TrialProgress(expected)

            def say(text: str) -> None:
                before = counter.trials
                counter(text)
                p.update(task, description=text, total=counter.total,
                         completed=max(0, counter.trials - 1) if counter.trials > before
                         else None)

            yield say
            p.update(task, completed=counter.total)

    return run()
