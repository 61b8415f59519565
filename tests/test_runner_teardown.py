"""A rank that dies by a signal after its part is done loses nothing: a warning, not a failure.

Gloo ranks have been seen, rarely, to abort ('terminate called without an active exception')
while they tear down after the run's last barrier. The ranks below are shell commands
standing in for the entry point, so the death comes at a chosen moment.
"""

import shutil
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from scalelab.errors import RunFailure
from scalelab.runner.launch import Job, RankSpec


def _job(tmp_path: Path, rank1: str, rank0: str = "exit 0") -> Job:
    (tmp_path / "config.json").write_text("{}")
    ok = RankSpec(0, "rank 0 (worker 0)", ["sh", "-c", rank0, "sh"], {"D": str(tmp_path)})
    dies = RankSpec(1, "rank 1 (server 0)", ["sh", "-c", rank1, "sh"], {"D": str(tmp_path)})
    return Job(tmp_path, tmp_path / "config.json", [ok, dies], timeout_s=5)


def test_a_death_after_the_done_mark_is_a_warning(tmp_path):
    job = _job(tmp_path, 'touch "$D/done-1"; kill -ABRT $$')
    job.start()
    job.wait()
    assert job.procs[1].returncode == -signal.SIGABRT
    assert len(job.teardown) == 1
    assert job.teardown[0].startswith("rank 1 (server 0) died (killed by SIGABRT) after its "
                                      "part was done")


def test_a_death_before_it_fails_the_job(tmp_path):
    job = _job(tmp_path, 'kill -ABRT $$')
    job.start()
    with pytest.raises(RunFailure, match=r"rank 1 \(server 0\) failed: died \(killed by SIGABRT"):
        job.wait()
    assert job.teardown == []


def test_an_error_exit_after_the_done_mark_still_fails(tmp_path):
    job = _job(tmp_path, 'touch "$D/done-1"; exit 1')
    job.start()
    with pytest.raises(RunFailure, match="exited with code 1"):
        job.wait()


def test_a_death_after_the_done_mark_is_not_blamed_for_another_failure(tmp_path):
    """A rank that died is preferred as the cause over one that lost its peer, unless it
    died after its part was done."""
    lost = ('sleep 0.3; echo \'{"kind": "comm", "error": "lost its peer", "time": 1}\' '
            '> "$D/error-0.json"; exit 1')
    job = _job(tmp_path, 'touch "$D/done-1"; kill -ABRT $$', rank0=lost)
    job.start()
    with pytest.raises(RunFailure, match=r"^rank 0 \(worker 0\) failed: lost its peer$"):
        job.wait()


@pytest.mark.dist
def test_real_ranks_mark_their_part_done(monkeypatch):
    import scalelab.runner as runner
    from scalelab.runner import RunConfig, run_training
    from scalelab.workload import WorkloadSpec

    kept = []  # the job folder, kept from the runner's clean-up (its shutil only)
    keep = SimpleNamespace(rmtree=lambda p, **kw: kept.append(Path(p)))
    monkeypatch.setattr(runner, "shutil", keep)
    spec = WorkloadSpec("tests.toy_runner:wide", input_shape=(6,), num_classes=3)
    result = run_training(RunConfig(workload=spec, workers=1, ps=1, steps=3, batch_size=4,
                                    timeout_s=30, device="cpu"))
    assert result["timed_steps"] >= 1 and "warnings" not in result
    (workdir,) = kept
    assert sorted(f.name for f in workdir.glob("done-*")) == ["done-0", "done-1"]
    assert (workdir / "result.json").exists()
    shutil.rmtree(workdir)
