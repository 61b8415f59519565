"""A compare step's input pipeline on this host: loader cores, the exposed input, the note.

Every emulated host is a process on this one machine, so a worker's loader processes share
the machine's cores with the workers' compute. A worker gets ``c = cores / W`` of them
(:func:`cores_per_worker`). Its core is busy while it computes and free while it waits for
the exchange, and its loaders decode whenever a core is free: the step follows
:func:`scalelab.theory.io.shared_cores_step_s` (the step without input, the loaders'
delivery rate, and the cores' capacity for compute plus decoding), and the exposed input is
what that adds to the step without input (:func:`exposed_input_s`). The parameter servers'
own CPU work (receiving and applying updates) is left out.

That step assumes ideal time slicing, with no cost for a batch's trip from a loader to its
worker through shared memory or for switching five or more processes on two cores. So
where a worker has loaders, the cores' bound is also measured: the case's
workers train at once on the folder, each fed by its own loaders, with no exchange
(:meth:`scalelab.experiment.measure.Measurements.fed_timings`); their median wait for a
batch plus compute is the step the cores allow, ``T_fed``. The predicted step is the larger
of the ideal one and ``T_fed`` (the exchange wait is when loaders decode, so it does not add
to ``T_fed``); both are kept in the step's ``input``.
"""

from __future__ import annotations

from typing import Any

from scalelab.experiment.case import CaseInputs
from scalelab.experiment.measure import worker_threads
from scalelab.theory import io as theory_io


def _cpu_count() -> int:
    from scalelab.runner.launch import cpu_count

    return cpu_count()


def loader_cores(workers: int) -> int:
    """Cores of this host no worker's torch threads use (the runner gives each of its
    ``workers`` workers :func:`~scalelab.experiment.measure.worker_threads`); 0 or less when
    the workers' threads cover every core."""
    return _cpu_count() - workers * worker_threads(workers)


def cores_per_worker(workers: int) -> float:
    """``c``: this host's cores over its ``workers`` workers (a worker and its loaders)."""
    return _cpu_count() / workers


def exposed_input_s(load_s_per_batch: float, loader_workers: int, step_s: float,
                    compute_cpu_s: float, cores: float) -> float:
    """Input time a worker's step gains over ``step_s`` (its step with the batch ready),
    seconds, with ``cores`` cores for the worker and its loaders (module doc)."""
    return theory_io.shared_cores_step_s(step_s, compute_cpu_s, load_s_per_batch,
                                         loader_workers, cores) - step_s


def step_input(cfg, io: dict | None, inputs: CaseInputs, workers: int, step_s: float,
               fed_step_s: float | None = None) -> dict[str, Any] | None:
    """The step's input pipeline: ``t_load`` at its batch under the case's contention, the
    cores of a worker and its loaders, the compute's CPU time (its threads busy for ``T_C``)
    and the exposed time over ``step_s`` (the step predicted without input); None on
    synthetic data. ``fed_step_s``, where the worker has loaders: the measured ``T_fed``
    (module doc), a floor under the step."""
    if not io or not io.get("load_s_per_sample"):
        return None
    load_s = cfg.batch_size * io["load_s_per_sample"] * inputs.contention
    cores = cores_per_worker(workers)
    compute_cpu_s = inputs.worker_compute_s * worker_threads(workers)
    ideal = step_s + exposed_input_s(load_s, cfg.loader_workers, step_s, compute_cpu_s, cores)
    fed = fed_step_s if cfg.loader_workers > 0 else None
    return {"load_s_per_batch": load_s, "loader_workers": cfg.loader_workers,
            "loader_cores": loader_cores(workers), "cores_per_worker": cores,
            "compute_cpu_s": compute_cpu_s, "ideal_step_s": ideal, "fed_step_s": fed,
            "io_s": max(ideal, fed or 0.0) - step_s}


def input_note(recommended, io: dict | None, workers: int) -> str:
    if io is None:
        return (f"loader_workers {recommended.loader_workers}: synthetic data, no input time "
                "to mask")
    cores = loader_cores(workers)
    return (f"input: {io['load_s_per_sample'] * 1e3:.3g} ms per sample on one core; "
            f"{max(cores, 0)} core(s) of this host beside {workers} workers' torch threads"
            + ("" if cores > 0 else "; loaders decode while their worker waits for the "
               "exchange"))
