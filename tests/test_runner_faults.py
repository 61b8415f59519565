"""Faults, checkpoints and bad input through the real command line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalelab.runner import RunConfig
from scalelab.runner.checkpoint import resume_step
from scalelab.workload import WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]
TOY = ["tests.toy_runner:faulty_mlp", "--input-shape", "6", "--num-classes", "3"]


def scalelab(args, cwd, env=None, timeout=120):
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    if not env or "TOY_FAULT" not in env:
        e.pop("TOY_FAULT", None)
    return subprocess.run([sys.executable, "-m", "scalelab", "run", *args], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=timeout)


def _alive_with(marker: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            pids.append(int(d.name))
    return pids


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.dist
@pytest.mark.parametrize("kind", ["raise", "exit"])
def test_rank_failure_stops_everyone(tmp_path, kind):
    r = scalelab([*TOY, "--workers", "2", "--ps", "1", "--steps", "6", "--batch-size", "4",
                  "--threads", "1", "--timeout", "30", "--quiet", "--out", "run.json"],
                 cwd=tmp_path, env={"TOY_FAULT": "1:3:" + kind})
    assert r.returncode == 1, r.stderr
    line = _one_line(r.stderr)
    assert "rank 1 (worker 1)" in line
    assert ("injected fault" in line) if kind == "raise" else ("exited with code 3" in line)
    assert _alive_with(str(tmp_path / "run.ranks")) == []
    assert not (tmp_path / "run.json").exists()


@pytest.mark.dist
def test_hung_rank_is_named_and_stopped(tmp_path):
    r = scalelab([*TOY, "--workers", "2", "--ps", "1", "--steps", "6", "--batch-size", "4",
                  "--threads", "1", "--timeout", "8", "--quiet", "--out", "run.json"],
                 cwd=tmp_path, env={"TOY_FAULT": "1:3:hang"})
    assert r.returncode == 1, r.stderr
    line = _one_line(r.stderr)
    assert "rank 1 (worker 1) stopped responding" in line, line
    assert "timed out after 8 s" in line
    assert _alive_with(str(tmp_path / "run.ranks")) == []


@pytest.mark.dist
def test_killed_run_resumes_to_the_same_parameters(tmp_path):
    common = [*TOY, "--workers", "2", "--ps", "2", "--steps", "7", "--batch-size", "4",
              "--threads", "1", "--quiet", "--lr", "0.1"]
    full = scalelab([*common, "--out", "full.json"], cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    crash = scalelab([*common, "--checkpoint-dir", "ck", "--checkpoint-every", "2",
                      "--out", "a.json"], cwd=tmp_path, env={"TOY_FAULT": "0:6:raise"})
    assert crash.returncode == 1, crash.stderr
    assert sorted(os.listdir(tmp_path / "ck"))  # checkpoints were written
    resumed = scalelab([*common, "--checkpoint-dir", "ck", "--checkpoint-every", "2",
                        "--resume", "--out", "b.json"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    a = json.loads((tmp_path / "full.json").read_text())
    b = json.loads((tmp_path / "b.json").read_text())
    assert b["start_step"] == 4
    assert b["final_param_checksum"] == a["final_param_checksum"]


@pytest.mark.dist
def test_ddp_checkpoint_resume(tmp_path):
    common = ["tests.toy_runner:mlp", "--input-shape", "6", "--num-classes", "3",
              "--workers", "2", "--architecture", "allreduce", "--batch-size", "4",
              "--threads", "1", "--quiet", "--checkpoint-dir", "ck", "--checkpoint-every", "3"]
    first = scalelab([*common, "--steps", "3", "--out", "a.json"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = scalelab([*common, "--steps", "5", "--resume", "--out", "b.json"], cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    full = scalelab([*common[:-4], "--steps", "5", "--out", "c.json"], cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    b = json.loads((tmp_path / "b.json").read_text())
    c = json.loads((tmp_path / "c.json").read_text())
    assert b["start_step"] == 3 and b["final_param_checksum"] == c["final_param_checksum"]
    # a checkpoint of another model: one line, exit 2, before any process starts
    other = scalelab(["tests.toy_runner:conv", "--input-shape", "1,8,8", "--num-classes", "3",
                      *common[5:], "--steps", "6", "--resume"], cwd=tmp_path)
    assert other.returncode == 2
    assert "checkpoint of another run" in _one_line(other.stderr)


def test_checkpoint_of_another_model_is_usage_error(tmp_path):
    from scalelab.errors import UsageError
    from scalelab.runner.checkpoint import identity, save

    a = RunConfig(WorkloadSpec("tests.toy_runner:mlp", input_shape=(6,), num_classes=3),
                  workers=2, ps=1, checkpoint_dir=str(tmp_path), resume=True, steps=9)
    b = RunConfig(WorkloadSpec("tests.toy_runner:conv", input_shape=(1, 8, 8), num_classes=3),
                  workers=2, ps=1, checkpoint_dir=str(tmp_path), resume=True, steps=9)
    save(str(tmp_path), "server-0", 4, {"identity": identity(a, [(16, 6)]), "step": 4})
    assert resume_step(a, [(16, 6)]) == 4
    with pytest.raises(UsageError, match="another run"):
        resume_step(b, [(4, 1, 3, 3)])
    with pytest.raises(UsageError, match="no complete checkpoint"):
        resume_step(RunConfig(a.workload, workers=2, ps=2, checkpoint_dir=str(tmp_path),
                              resume=True, steps=9), [(16, 6)])


@pytest.mark.parametrize("args, message", [
    (["--workers", "2", "--ps", "0"], "--ps must be >= 1"),
    (["--workers", "0"], "--workers must be >= 1"),
    (["--workers", "2", "--architecture", "allreduce", "--mode", "async"],
     "needs --architecture ps"),
    (["--workers", "2", "--colocate", "--ps", "1"], "--ps must equal --workers"),
    (["--workers", "2", "--resume"], "need --checkpoint-dir"),
    (["--workers", "2", "--ps", "9"], "cannot fill"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    extra = ["--partition", "tensor"] if "9" in args else []
    r = scalelab(["tests.toy_runner:mlp", "--input-shape", "6", "--num-classes", "3",
                  *args, *extra, "--quiet"], cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert message in _one_line(r.stderr)


def test_torchrun_world_size_must_match_roles(tmp_path):
    r = scalelab(["tests.toy_runner:mlp", "--input-shape", "6", "--num-classes", "3",
                  "--workers", "2", "--ps", "1", "--launcher", "torchrun", "--quiet"],
                 cwd=tmp_path, env={"RANK": "0", "WORLD_SIZE": "5", "LOCAL_RANK": "0",
                                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"})
    assert r.returncode == 2
    assert "world size 5 does not match the roles" in _one_line(r.stderr)


def test_emulate_network_bad_rate_is_usage_error(tmp_path):
    r = scalelab(["tests.toy_runner:mlp", "--input-shape", "6", "--num-classes", "3",
                  "--workers", "2", "--emulate-network", "fast", "--quiet"], cwd=tmp_path)
    assert r.returncode == 2
    _one_line(r.stderr)
