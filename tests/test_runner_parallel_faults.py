"""A killed rank of a pipeline or tensor-parallel run fails the whole run cleanly, within the
timeout, naming the rank: exit 1 on the command line, RunFailure in Python."""

import os
import signal
import time

import pytest

from scalelab.errors import RunFailure
from tests.parallel_reference import GPT2_UNTIED, config

pytestmark = [pytest.mark.dist, pytest.mark.slow]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.mark.parametrize("layout,victim,name", [
    (dict(pp=2, accumulation=2), 1, "rank 1 (pp 1, dp 0, tp 0)"),
    (dict(tp=2), 0, "rank 0 (pp 0, dp 0, tp 0)"),
])
def test_a_killed_rank_fails_the_run_within_its_timeout(layout, victim, name):
    from scalelab.runner.parallel_run import run_parallel

    cfg = config(model=GPT2_UNTIED, steps=200, **layout).with_(timeout_s=20)
    killed = []

    def kill_at_step_2(rec):
        if rec.get("step") == 2 and not killed:
            killed.append((rec["pid"], time.monotonic()))
            os.kill(rec["pid"], signal.SIGKILL)

    with pytest.raises(RunFailure) as e:
        run_parallel(cfg, progress=kill_at_step_2, watch_rank=victim)
    assert killed, "the run ended before its step 2"
    pid, at = killed[0]
    took = time.monotonic() - at
    print(f"{name} killed: the run failed {took:.1f} s later: {e.value}")
    assert str(e.value).startswith(f"{name} failed: died (killed by SIGKILL)"), str(e.value)
    assert not _alive(pid)
    assert took < cfg.timeout_s + 30
