"""How a tensor- or pipeline-parallel step is split into its phases, and how each is timed.

Every phase is host wall time (``time.perf_counter``) on each rank:

- ``tp_comm_s``: the time the rank's host spends inside tensor-parallel collectives, on
  probe steps (:func:`is_probe`: every second step after the warm-up). DTensor
  issues them as functional collectives (``_c10d_functional.all_reduce``,
  ``all_gather_into_tensor``, ``reduce_scatter_tensor``, and the ``wait_tensor`` that
  blocks until one has arrived); :class:`CollectiveClock`, a ``TorchDispatchMode`` around
  forward and backward, adds up the time spent in exactly those operators. FSDP2, the
  pipeline and the data-parallel all-reduce use ``torch.distributed``'s own collectives and
  point-to-point sends, which it does not count. The mode sees every operator (a Python call
  per operator: 37 -> 93 ms for forward and backward of the 4-layer test model, batch 4 x
  32, one thread, on this project's 2-core CPU), so a probe step is slow: the other phases
  and the step are the medians of the steps without it.
- ``pp_bubble_s`` (pipelines): the schedule's wall time minus the time the rank's stages
  spent in their forward and backward chunks
  (:class:`~scalelab.runner.pipeline_parallel.TimedStage`): the waits for the previous
  stage's activations and the next stage's gradients, i.e. the bubble, with the
  point-to-point transfers that end those waits.
- ``compute_s``: forward and backward (``work_s``: the chunks' time with a pipeline, the
  whole of it without) of the plain steps, less the rank's median ``tp_comm_s``.
- ``dp_exchange_s``: the gradients' all-reduce over the data-parallel ranks, timed around
  it. With FSDP2 the exchange (all-gathers in forward, reduce-scatters in backward) runs
  inside forward and backward, overlapped by FSDP2's own streams and hooks; it is then in
  ``compute_s`` and ``dp_exchange_s`` is not measured (``None``).
- ``data_s``, ``optimizer_s``: the batch's preparation and the optimizer's step.

On a GPU (``sync``: ``torch.cuda.synchronize``) every boundary waits for the device, so the
phases are the device's too; that path has not run on this project's machines (no GPU).
"""

from __future__ import annotations

import contextlib
import time

from torch.utils._python_dispatch import TorchDispatchMode

NAMESPACE = "_c10d_functional"


class CollectiveClock(TorchDispatchMode):
    """Adds up the seconds spent in functional collectives (DTensor's) while active."""

    def __init__(self):
        super().__init__()
        self.seconds = 0.0
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace != NAMESPACE:
            return func(*args, **(kwargs or {}))
        t = time.perf_counter()
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.seconds += time.perf_counter() - t
            self.calls += 1


class ParallelStepTimer:
    """One step's phases, in seconds (see the module docstring)."""

    def __init__(self, sync=None):
        self.sync = sync
        self.phases: dict[str, float] = {}
        self._t0 = None

    def _now(self) -> float:
        if self.sync is not None:
            self.sync()
        return time.perf_counter()

    def start(self) -> None:
        self._t0 = self._now()

    def stop(self) -> dict:
        self.phases["step_s"] = self._now() - self._t0
        return dict(self.phases)

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def phase(self, name: str):
        t = self._now()
        try:
            yield
        finally:
            self.add(name, self._now() - t)

    @contextlib.contextmanager
    def work(self, clock: CollectiveClock | None = None, timed_stages=None):
        """Forward and backward: ``work_s`` (with a pipeline its stages' chunks, and
        ``pp_bubble_s`` the rest of the schedule's time); with a ``clock`` (a probe step)
        also ``tp_comm_s``, the time in tensor-parallel collectives, and ``probe``."""
        c0 = clock.seconds if clock is not None else 0.0
        for st in timed_stages or ():
            st.take()
        t = self._now()
        try:
            with clock if clock is not None else contextlib.nullcontext():
                yield
        finally:
            wall = self._now() - t
            busy = sum(st.take() for st in timed_stages) if timed_stages else wall
            self.add("work_s", busy)
            self.add("pp_bubble_s", max(0.0, wall - busy))
            if clock is not None:
                self.add("tp_comm_s", clock.seconds - c0)
                self.phases["probe"] = True


def is_probe(step: int, warmup: int, tp: int) -> bool:
    """Whether tensor-parallel collectives are timed in ``step``: every second step after
    the warm-up (the second, fourth, ...), when there is tensor parallelism."""
    return tp > 1 and step >= warmup and (step - warmup) % 2 == 1


def split_records(records: list[dict], tp: int) -> dict[str, list[float]]:
    """One rank's timed steps as phase -> values (module docstring): the phases of the
    steps without the dispatch mode, ``tp_comm_s`` of the probe steps, and ``compute_s``
    each plain step's ``work_s`` less the rank's median ``tp_comm_s``."""
    import statistics

    plain = [r for r in records if not r.get("probe")] or records
    probes = [r for r in records if r.get("probe")]
    out = {k: [r[k] for r in plain if k in r] for k in (
        "work_s", "pp_bubble_s", "dp_exchange_s", "data_s", "optimizer_s", "step_s")}
    if tp == 1:
        tp_vals, tp_med = [0.0 for _ in plain], 0.0
    elif probes:
        tp_vals = [r["tp_comm_s"] for r in probes]
        tp_med = statistics.median(tp_vals)
    else:  # one timed step: nothing probed, the communication stays in compute
        tp_vals, tp_med = [], 0.0
    out["tp_comm_s"] = tp_vals
    out["compute_s"] = [max(0.0, w - tp_med) for w in out["work_s"]]
    return out
