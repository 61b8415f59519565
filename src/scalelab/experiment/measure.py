"""Measurements on this machine that a case's prediction starts from.

- **compute**: one profile of the model (:func:`scalelab.profiler.time_steps`, the one step
  timer) in a lone process with the torch threads a worker of that case gets. A
  parameter-server worker's compute is forward + backward (its servers apply the update);
  an all-reduce worker's is forward + backward + optimizer step.
- **contention**: every emulated host is a process on this one machine, so W workers share
  its cores. The case's W workers are started at once, each timing steps; their median
  compute over the lone one is the contention factor.
- **loopback floor** (all-reduce): the case's W workers also train at once as DDP processes
  on Gloo over loopback, the runner's own exchange on the fastest link there is. Gloo's
  threads use the cores beside the compute and each step waits for the slowest worker,
  which W plain processes do not show; no link makes a step faster than this one, so its
  median is a floor under the case's predicted step (``CaseInputs.floor_step_s``), for a
  case on an emulated link (on loopback that timing would be the run itself). It is timed
  twice and the lower median kept: other load on the machine only slows a timing down,
  and a floor raised by a burst of it would raise the prediction with it.
- **compute in step** (parameter servers): the case's W workers train at once on
  loopback, meeting at a barrier before every step as the runner's workers meet at their
  servers (a server answers when the last push is in). Each worker's compute plus its wait
  at the barrier is the slowest worker's compute, which the median of W free-running
  processes underrates; timed twice, the lower median kept, it is a floor under the case's
  T_C (``CaseInputs.compute_floor_s``), for a case on an emulated link.
- **link**: :func:`scalelab.netem.measure_link` on a two-host emulated network of the
  case's rate (bandwidth of one TCP stream, latency from a ping-pong), or the same probe on
  loopback without a rate. Every host's link is shaped, workers and dedicated servers alike.
- **fed steps**: on an image folder with loader processes, the loaders decode on the same
  cores as the workers compute. The case's W workers are started at once, each reading its
  shards through its own L loader processes (the runner's
  :class:`~scalelab.runner.loader.LoaderShards`) and training on them with no exchange; the
  median wait for a batch and the compute under that load tell how long the host's cores
  take to feed and train one step (:meth:`Measurements.fed_timings`).

- **sharded** (fsdp): the step without its exchange, the case's W workers at once
  (``CaseInputs.sharded_compute_s``; ZeRO-1: the contended plain steps above, ZeRO-2/3:
  each worker FSDP2's step on a process group of its own,
  :func:`scalelab.experiment.sharded_timing.time_fsdp_concurrently`,
  the lower median of ``FLOOR_REPEATS``), and the step's collectives
  (:func:`scalelab.theory.sharded_step.step_collectives`) replayed on Gloo in sequence on
  the case's link, emulated or loopback
  (:func:`scalelab.experiment.sharded_timing.time_collectives`).

Compute, contention and floor are measured just before each case (``fresh_profiles``), so
that load from other processes on a shared machine weighs on the prediction as it does on
the run.

The step-timing processes run :mod:`scalelab.experiment.timing_child` (``--time-steps``,
``--time-ddp-steps``, ``--time-fed-steps``, ``--time-fsdp-steps`` and
``--time-collectives``).
"""

from __future__ import annotations

import os
import statistics
import sys
from typing import Any

from scalelab.experiment.case import CaseInputs, full_duplex_of
from scalelab.experiment.sharded_timing import (
    model_collectives,
    time_collectives,
    time_fsdp_concurrently,
)
from scalelab.experiment.together import CHILD, spec_json, time_together
from scalelab.workload import WorkloadSpec

FED_STEPS = 8
"""Fed or DDP steps timed at least: a loader's batch arrives every few steps, not every
step, and a DDP step waits for the slowest of its workers."""
FLOOR_REPEATS = 2
"""Times the DDP floor is timed; the lowest median is kept: other load on the machine only
ever slows a timing down, and a floor raised by a burst of it raises the prediction with
it. The contended workers are timed once: with more workers than cores their timed steps
scatter both ways (one repeat of four workers on two cores read x1.57 where runs take
x1.9-2.0), and the lower of two repeats is then too low."""


def worker_threads(workers: int) -> int:
    """Torch threads the local launcher gives each worker (as the runner does)."""
    from scalelab.runner.launch import cpu_count

    return max(1, cpu_count() // workers)


def time_concurrently(spec: WorkloadSpec, batch_size: int, processes: int, threads: int,
                      steps: int, seed: int = 0, timeout_s: float = 300.0,
                      algorithm: str = "default") -> list[dict]:
    """Time ``steps`` training steps in ``processes`` processes at once; one dict each.

    Every process builds the model and warms up, then all start timing together (a line on
    their standard input), so the timed steps overlap. Each runs in a session of its own, as
    the runner's ranks do, so the scheduler shares the cores between them as in a run.
    """
    cmd = [sys.executable, "-m", CHILD, "--time-steps",
           spec_json(spec, algorithm), str(batch_size), str(threads), str(steps), str(seed)]
    return time_together([cmd] * processes, timeout_s)


def time_fed_concurrently(spec: WorkloadSpec, data: str, batch_size: int, workers: int,
                          loader_workers: int, threads: int, steps: int, seed: int = 0,
                          timeout_s: float = 300.0, algorithm: str = "default") -> list[dict]:
    """Worker k of ``workers`` (all at once) trains ``steps`` steps on its shards of the image
    folder ``data``, read through ``loader_workers`` loader processes; one dict per worker
    with the medians of ``data_s`` (the wait for the batch) and of each compute phase."""
    told = spec_json(spec, algorithm)
    cmds = [[sys.executable, "-m", CHILD, "--time-fed-steps",
             told, str(batch_size), str(threads), str(steps), str(seed), data,
             str(loader_workers), str(workers), str(k)] for k in range(workers)]
    return time_together(cmds, timeout_s)


def time_ddp_concurrently(spec: WorkloadSpec, batch_size: int, workers: int, threads: int,
                          steps: int, seed: int = 0, timeout_s: float = 300.0,
                          ddp: bool = True, algorithm: str = "default") -> list[dict]:
    """``workers`` DDP processes on Gloo over loopback (127.0.0.1) train ``steps`` steps at
    once, as the runner's all-reduce workers do; one dict per rank, a
    :class:`~scalelab.profiler.timing.StepTiming` (``step_s``: forward + backward with its
    all-reduce + optimizer). ``ddp=False``: plain models that meet at a barrier before each
    step instead (its wait is the timing's ``data_s``)."""
    from scalelab.runner.launch import free_port

    told, port = spec_json(spec, algorithm), free_port()
    cmds = [[sys.executable, "-m", CHILD, "--time-ddp-steps",
             told, str(batch_size), str(threads), str(steps), str(seed), str(port),
             str(workers), str(rank), str(int(ddp))] for rank in range(workers)]
    return time_together(cmds, timeout_s, env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})


def compute_of(timing: dict, architecture: str) -> float:
    """A worker's compute in a timing: forward + backward (ps), the whole step (all-reduce)."""
    if architecture == "ps":
        return timing["forward_s"] + timing["backward_s"]
    return timing["step_s"]


def median_step_s(timings: list[dict]) -> float:
    """The median over processes of their median step."""
    return statistics.median(t["step_s"] for t in timings)


def fed_step_of(timings: list[dict], architecture: str) -> float:
    """The median over workers of a timing's wait before each step plus its compute: for a
    fed timing the wait for the batch; for workers meeting before each step the wait at
    the meeting (wait + compute: the slowest worker's compute)."""
    return statistics.median(t["data_s"] + compute_of(t, architecture) for t in timings)


class Measurements:
    """Lone profiles, contention factors and links, measured when first needed and cached.

    :meth:`begin_case` forgets the compute measurements (not the links), so that a case's
    profile and contention are measured in the minute before it runs, under the same load
    from other processes on this machine; ``profiles`` keeps every one measured.
    """

    def __init__(self, spec: WorkloadSpec, profile_steps: int = 5, probe_seconds: float = 1.0,
                 seed: int = 0, fresh_profiles: bool = True, say=None,
                 algorithm: str = "default"):
        self.spec, self.profile_steps, self.probe_seconds = spec, profile_steps, probe_seconds
        self.algorithm = algorithm  # every timing trains in the runs' configuration
        self.seed, self.fresh_profiles = seed, fresh_profiles
        self.say = say or (lambda msg: None)
        self.lone: dict[tuple[int, int], dict] = {}
        self.crowd: dict[tuple[int, int], list[dict]] = {}
        self.fed: dict[tuple[str, int, int, int], list[dict]] = {}
        self.ddp: dict[tuple[int, int], list[dict]] = {}
        self.sharded: dict[tuple, float] = {}
        self.links: dict[str | None, dict] = {}
        self.profiles: list[dict] = []

    def begin_case(self) -> None:
        if self.fresh_profiles:
            self.lone.clear()
            self.crowd.clear()
            self.fed.clear()
            self.ddp.clear()
            self.sharded.clear()

    def lone_timing(self, batch_size: int, threads: int) -> dict:
        key = (batch_size, threads)
        if key not in self.lone:
            self.say(f"profiling batch {batch_size} on {threads} thread(s)")
            self.lone[key] = time_concurrently(self.spec, batch_size, 1, threads,
                                               self.profile_steps, self.seed,
                                               algorithm=self.algorithm)[0]
            self.profiles.append({"batch_size": batch_size, **self.lone[key]})
        return self.lone[key]

    def contended_timings(self, batch_size: int, workers: int) -> list[dict]:
        key = (batch_size, workers)
        if key not in self.crowd:
            if workers == 1:
                self.crowd[key] = [self.lone_timing(batch_size, worker_threads(1))]
            else:
                self.say(f"timing {workers} workers at once (contention), batch {batch_size}")
                self.crowd[key] = time_concurrently(
                    self.spec, batch_size, workers, worker_threads(workers),
                    self.profile_steps, self.seed, algorithm=self.algorithm)
        return self.crowd[key]

    def contention(self, batch_size: int, workers: int, architecture: str) -> float:
        lone = compute_of(self.lone_timing(batch_size, worker_threads(workers)), architecture)
        crowd = [compute_of(t, architecture)
                 for t in self.contended_timings(batch_size, workers)]
        return statistics.median(crowd) / lone

    def loopback_timings(self, batch_size: int, workers: int, ddp: bool = True
                         ) -> list[dict]:
        """:func:`time_ddp_concurrently` for a case's workers (all-reduce: as DDP processes;
        ``ddp=False``: meeting at a barrier before each step), timed ``FLOOR_REPEATS``
        times; the repeat with the lowest median is kept (the timing is a floor under the
        prediction)."""
        key = (batch_size, workers, ddp)
        if key not in self.ddp:
            what = "DDP workers" if ddp else "workers in step (a barrier before each)"
            self.say(f"timing {workers} {what} at once on loopback, batch {batch_size} "
                     f"({FLOOR_REPEATS} times)")
            repeats = [time_ddp_concurrently(self.spec, batch_size, workers,
                                             worker_threads(workers),
                                             max(FED_STEPS, self.profile_steps), self.seed,
                                             ddp=ddp, algorithm=self.algorithm)
                       for _ in range(FLOOR_REPEATS)]
            self.ddp[key] = min(repeats, key=median_step_s if ddp
                                else lambda ts: fed_step_of(ts, "ps"))
        return self.ddp[key]

    def fed_timings(self, data: str, batch_size: int, workers: int, loader_workers: int
                    ) -> list[dict]:
        """:func:`time_fed_concurrently` for a case's workers, each with its loaders."""
        key = (data, batch_size, workers, loader_workers)
        if key not in self.fed:
            self.say(f"timing {workers} workers fed by {loader_workers} loader(s) each, "
                     f"batch {batch_size}")
            self.fed[key] = time_fed_concurrently(
                self.spec, data, batch_size, workers, loader_workers, worker_threads(workers),
                max(FED_STEPS, self.profile_steps), self.seed, algorithm=self.algorithm)
        return self.fed[key]

    def sharded_compute_s(self, batch_size: int, workers: int, level: int) -> float:
        """A ZeRO-``level`` step without its exchange, the case's workers at once, seconds:
        ZeRO-1 the contended plain step (DDP's model, the whole optimizer step), ZeRO-2/3
        FSDP2's step on a process group of one (``time_fsdp_concurrently``), the
        lower median of ``FLOOR_REPEATS`` (load from other processes only slows it)."""
        if level == 1:
            return median_step_s(self.contended_timings(batch_size, workers))
        return self._fsdp_compute_s(batch_size, workers, level)

    def contended_backward_s(self, batch_size: int, workers: int) -> float:
        """The median backward of the case's workers computing at once, seconds."""
        return statistics.median(t["backward_s"]
                                 for t in self.contended_timings(batch_size, workers))

    def _fsdp_compute_s(self, batch_size: int, workers: int, level: int) -> float:
        key = ("compute", batch_size, workers, level)
        if key not in self.sharded:
            self.say(f"timing {workers} ZeRO-{level} workers at once without exchange, batch "
                     f"{batch_size} ({FLOOR_REPEATS} times)")
            self.sharded[key] = min(median_step_s(time_fsdp_concurrently(
                self.spec, batch_size, workers, worker_threads(workers),
                max(FED_STEPS, self.profile_steps), level, self.seed,
                algorithm=self.algorithm)) for _ in range(FLOOR_REPEATS))
        return self.sharded[key]

    def sharded_exchange(self, rate: str | None, workers: int, level: int) -> dict:
        """A ZeRO-``level`` step's collectives replayed in sequence on the link of
        ``rate`` (None: loopback): ``time_collectives``'s dict."""
        key = ("exchange", rate, workers, level)
        if key not in self.sharded:
            self.say(f"timing ZeRO-{level}'s collectives of {workers} ranks on "
                     f"{rate or 'loopback'}")
            self.sharded[key] = time_collectives(model_collectives(self.spec, level, workers),
                                                 workers, rate)
        return self.sharded[key]

    def link(self, rate: str | None) -> dict:
        if rate not in self.links:
            from scalelab import netem

            self.say(f"measuring the link ({rate or 'loopback'})")
            if rate is None:
                self.links[rate] = netem.measure_loopback(self.probe_seconds)
            else:
                with netem.emulated_network(2, rate) as net:
                    self.links[rate] = netem.measure_link(net, self.probe_seconds)
        return self.links[rate]


def case_inputs(config: dict[str, Any], exchange_form: str, meas: Measurements,
                info) -> CaseInputs:
    """Measure what one case's prediction needs (``config`` keyed by the grid's keys).

    ``exchange_form`` is the run's ``RunConfig.exchange_form``; ``info`` the workload's
    :func:`scalelab.opcount.describe`. An all-reduce case of two or more workers on an
    emulated link also gets its ``floor_step_s``: the median step of its workers timed as
    DDP processes on loopback (:meth:`Measurements.loopback_timings`); a parameter-server
    case its ``compute_floor_s``: its workers' compute timed meeting before each step. A
    case that itself runs on loopback gets neither: those timings are too near the run. A
    sharded case of two or more workers, on any link, gets its step without the exchange
    (``sharded_compute_s``) and its collectives timed on its link (``link_exchange_s``).
    """
    arch, w, b = config["architecture"], config["workers"], config["batch_size"]
    lone = meas.lone_timing(b, worker_threads(w))
    link = meas.link(config.get("rate"))
    floor = compute_floor = 0.0
    level = (config.get("zero") or 3) if arch == "fsdp" else 0
    sharded = {}
    if level and w > 1:  # on any link: the step's parts are timed apart from the run
        x = meas.sharded_exchange(config.get("rate"), w, level)
        sharded = {"sharded_compute_s": meas.sharded_compute_s(b, w, level),
                   "link_exchange_s": x["exchange_s"]}
        if level == 1:  # DDP's buckets, reduced while backward goes on
            sharded.update(allreduce_buckets_s=tuple(x["all_reduce_s"]),
                           backward_s=meas.contended_backward_s(b, w))
    if w > 1 and config.get("rate") is not None:
        if arch == "allreduce":
            floor = median_step_s(meas.loopback_timings(b, w))
        elif arch == "ps":
            compute_floor = fed_step_of(meas.loopback_timings(b, w, ddp=False), "ps")
    return CaseInputs(
        architecture=arch, workers=w, ps=config.get("ps") or 0,
        partition=config.get("partition") or "balanced", param_bytes=info.param_bytes,
        tensor_bytes=tuple(info.tensor_bytes) if config.get("partition") == "tensor" else (),
        compute_s=compute_of(lone, arch), contention=meas.contention(b, w, arch),
        bandwidth_Bps=link["bandwidth_Bps"], latency_s=link["latency_s"],
        full_duplex=full_duplex_of(exchange_form), floor_step_s=floor,
        compute_floor_s=compute_floor, colocated=config.get("ps_placement") == "colocated",
        zero=level, **sharded)


def _median(steps: dict, name: str) -> float | None:
    s = steps.get(name)
    return s["median"] if isinstance(s, dict) else None


def measured_parts(run: dict) -> dict[str, float | None]:
    """Median step, compute and exchange of a run (all-reduce: exchange is inside backward)."""
    steps = run["steps"]
    arch = run["config"]["architecture"]
    return {
        "step_s": _median(steps, "step_s"),
        "compute_s": _median(steps, "compute_s") if arch == "ps" else None,
        "exchange_s": _median(steps, "exchange_s") if arch == "ps" else None,
        "samples_per_s": run.get("samples_per_s"),
    }
