"""Timings of a sharded step's parts for :mod:`scalelab.experiment.measure`: the step
without its exchange (each worker FSDP2 on a process group of its own, all at once) and the
step's collectives replayed on Gloo, on loopback or on an emulated network
(:mod:`scalelab.theory.sharded_step`). The processes run
:mod:`scalelab.experiment.timing_child` (``--time-fsdp-steps``, ``--time-collectives``).
"""

from __future__ import annotations

import json
import os
import sys

from scalelab.experiment.together import CHILD, spec_json, time_together
from scalelab.workload import WorkloadSpec


def time_fsdp_concurrently(spec: WorkloadSpec, batch_size: int, workers: int, threads: int,
                           steps: int, level: int, seed: int = 0, timeout_s: float = 300.0,
                           algorithm: str = "default") -> list[dict]:
    """``workers`` processes at once, each timing ZeRO-``level`` (2 or 3) steps on a process
    group of its own: FSDP2's compute and per-unit work without the exchange; one dict
    each."""
    from scalelab.runner.launch import free_port

    told = spec_json(spec, algorithm)
    cmds = [[sys.executable, "-m", CHILD, "--time-fsdp-steps", told, str(batch_size),
             str(threads), str(steps), str(seed), str(level), str(free_port())]
            for _ in range(workers)]
    return time_together(cmds, timeout_s, env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})


def model_collectives(spec: WorkloadSpec, level: int, workers: int) -> list:
    """The collectives one step of ZeRO-``level`` issues for ``spec``'s model, counted on
    meta tensors (:func:`scalelab.theory.sharded_step.step_collectives`); FSDP2's root unit
    takes the parameters no block holds."""
    from scalelab.meta_build import meta_model
    from scalelab.profiler.memory import fsdp_units
    from scalelab.theory.sharded_step import step_collectives

    model = meta_model(spec)
    params = [p.numel() for p in model.parameters() if p.requires_grad]
    units = [sum(p.numel() for p in u.parameters() if p.requires_grad)
             for u in fsdp_units(model)]
    root = sum(params) - sum(units)
    return step_collectives(level, workers, units + ([root] if root > 0 else []), params)


def time_collectives(collectives: list, workers: int, rate: str | None = None,
                     repeats: int = 3, timeout_s: float = 300.0, gap_s: float = 0.0) -> dict:
    """``workers`` Gloo ranks run ``collectives`` in sequence, on loopback or on an emulated
    network of ``rate``: the slowest rank's median of ``repeats`` (``exchange_s``) and the
    median of each all-reduce in it (``all_reduce_s``, a list), seconds. ``gap_s``: each
    rank idles that long before each collective (and it is counted in ``exchange_s``), as a
    step computes between them: an emulated link's token bucket refills meanwhile."""
    from scalelab import netem
    from scalelab.runner.launch import free_port

    plan = json.dumps({"collectives": [[c.kind, c.numel, c.src] for c in collectives],
                       "repeats": repeats, "gap_s": gap_s})

    def cmds(prefix, addr, port):
        return [prefix(r) + [sys.executable, "-m", CHILD, "--time-collectives", plan, addr,
                             str(port), str(workers), str(r)] for r in range(workers)]

    if rate is None:
        out = time_together(cmds(lambda r: [], "127.0.0.1", free_port()), timeout_s,
                             env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})
    else:
        with netem.emulated_network(workers, rate) as net:
            out = time_together(cmds(net.exec_prefix, net.hosts[0].ip, 29500), timeout_s,
                                 env={**os.environ, "GLOO_SOCKET_IFNAME": net.hosts[0].ifname})
    slowest = max(out, key=lambda o: o["exchange_s"])
    return {"exchange_s": slowest["exchange_s"], "all_reduce_s": slowest["all_reduce_s"]}
