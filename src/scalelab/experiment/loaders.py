"""A compare step's input pipeline on this host: loader cores, the exposed input, the note.

A worker's compute keeps its torch threads' cores busy; loader processes get what is left
(:func:`loader_cores`). The exposed input per step follows
:func:`scalelab.theory.io.node_exposed_io_s` with the host's workers as one node's devices;
with no core left, loaders only move the decoding onto the workers' cores and all of
``t_load`` shows (:func:`exposed_input_s`).
"""

from __future__ import annotations

from typing import Any

from scalelab.experiment.case import CaseInputs
from scalelab.experiment.measure import worker_threads
from scalelab.theory import io as theory_io


def loader_cores(workers: int) -> int:
    """Cores of this host left for loader processes: its cores less the torch threads the
    runner gives its ``workers`` workers (:func:`~scalelab.experiment.measure.worker_threads`
    each); 0 or less when the workers' compute takes every core."""
    from scalelab.runner.launch import cpu_count

    return cpu_count() - workers * worker_threads(workers)


def exposed_input_s(load_s_per_batch: float, loader_workers: int, compute_s: float,
                    workers: int, free_cores: int) -> float:
    """Input time per step a worker of this host waits for, seconds: the ``workers``
    workers' loaders share ``free_cores`` (:func:`scalelab.theory.io.node_exposed_io_s`, G =
    workers); with no free core (or no loader) all of ``t_load`` shows (module doc)."""
    if loader_workers == 0 or free_cores <= 0:
        return theory_io.exposed_io_s(load_s_per_batch, 0, compute_s)
    return theory_io.node_exposed_io_s(load_s_per_batch, loader_workers, compute_s,
                                       gpus_per_node=workers, cpu_cores=free_cores)


def step_input(cfg, io: dict | None, inputs: CaseInputs, workers: int
           ) -> dict[str, Any] | None:
    """The step's input pipeline: t_load at its batch under the case's contention, the
    loader cores of this host, and the exposed time; None on synthetic data."""
    if not io or not io.get("load_s_per_sample"):
        return None
    load_s = cfg.batch_size * io["load_s_per_sample"] * inputs.contention
    cores = loader_cores(workers)
    exposed = exposed_input_s(load_s, cfg.loader_workers, inputs.worker_compute_s, workers,
                              cores)
    return {"load_s_per_batch": load_s, "loader_workers": cfg.loader_workers,
            "loader_cores": cores, "io_s": exposed}


def input_note(recommended, io: dict | None, workers: int) -> str:
    if io is None:
        return (f"loader_workers {recommended.loader_workers}: synthetic data, no input time "
                "to mask")
    cores = loader_cores(workers)
    return (f"input: {io['load_s_per_sample'] * 1e3:.3g} ms per sample on one core; "
            f"{max(cores, 0)} core(s) of this host left for loader processes beside {workers} "
            f"workers' compute" + ("" if cores > 0 else ": loaders share their worker's cores"))
