"""Timing processes started together: each trains in a process of its own (``python -m``
:data:`CHILD`), says ``ready`` once built and warmed up, and starts timing when all are told
``go``, so their timed steps overlap as a run's ranks do. Used by
:mod:`scalelab.experiment.measure` and :mod:`scalelab.experiment.sharded_timing`."""

from __future__ import annotations

import contextlib
import json
import subprocess

from scalelab.errors import RunFailure
from scalelab.workload import WorkloadSpec

CHILD = "scalelab.experiment.timing_child"
"""The module every step-timing process runs (``python -m``)."""


def _start(cmds: list[list[str]], env: dict | None = None) -> list[subprocess.Popen]:
    # each in its own session, as the runner starts its ranks: with the kernel's session
    # autogroups, processes of one session share one group's CPU time
    # and with the runner's OpenMP wait policy, so that they time what a rank would compute
    # forked from a warm interpreter (they time on the CPU): torch is imported once
    from scalelab.runner import warmstart
    from scalelab.runner.launch import training_environment

    return [warmstart.popen(cmd, env=training_environment(env), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
            for cmd in cmds]


def spec_json(spec: WorkloadSpec, algorithm: str) -> str:
    """What a timing process is told to train: the workload and its computation
    configuration (``algorithm``, as ``scalelab run --algorithm`` takes it)."""
    return json.dumps({**spec.to_dict(), "algorithm": algorithm})


def time_together(cmds: list[list[str]], timeout_s: float, env: dict | None = None
                  ) -> list[dict]:
    """Start ``cmds`` (one timing process each), tell them all to go once every one is
    ready, and return the JSON each printed last; a process that fails or outlasts
    ``timeout_s`` is a :class:`~scalelab.errors.RunFailure` saying so."""
    procs = _start(cmds, env)
    try:
        for p in procs:
            line = p.stdout.readline().strip()
            if line != "ready":
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=10)  # its output ended: let it exit, then read why
                err = p.stderr.read().strip().splitlines()[-1:] if p.poll() is not None else []
                raise RunFailure("step timing process failed to start: "
                                 + (err[0] if err else repr(line)))
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        out = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout_s)
            if p.returncode != 0:
                raise RunFailure("step timing process failed: "
                                 f"{(stderr.strip().splitlines() or ['?'])[-1]}")
            out.append(json.loads(stdout.strip().splitlines()[-1]))
        return out
    except subprocess.TimeoutExpired:
        raise RunFailure(f"step timing took longer than {timeout_s:.0f} s") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
