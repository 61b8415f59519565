"""`scalelab run --launcher torchrun` under a real torchrun on 127.0.0.1: each rank is the
`scalelab` command itself, and the job ends as torchrun sees it (every rank exit 0)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalelab.runner.launch import free_port

pytestmark = [pytest.mark.dist, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("roles", [["--workers", "2", "--architecture", "allreduce"],
                                   ["--workers", "1", "--ps", "1"]],
                         ids=["allreduce", "ps"])
def test_a_torchrun_job_ends_with_every_rank_done(tmp_path, roles):
    out = tmp_path / "run.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--node-rank", "0",
           "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "--max-restarts", "0",
           "-m", "scalelab", "run", "tests.toy_runner:wide", "--input-shape", "6",
           "--num-classes", "3", *roles, "--steps", "8", "--device", "cpu",
           "--launcher", "torchrun", "--quiet", "--out", str(out)]
    env = {**os.environ, "SCALELAB_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
           "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "ChildFailedError" not in p.stderr and "terminate called" not in p.stderr
    data = json.loads(out.read_text())
    assert data["config"]["workers"] == int(roles[1])
    assert data["timed_steps"] >= 5 and data["samples_per_s"] > 0
    # rank 0 wrote its records beside the result, rank 1 its own
    ranks = [out.with_name("run.ranks.jsonl"), out.with_name("run.ranks.rank1.jsonl")]
    for path in ranks:
        assert path.exists() and path.read_text().strip()


def test_the_command_leaves_without_finalization_once_it_was_a_rank(monkeypatch, capsys):
    import scalelab.cli as cli
    from scalelab.runner import entry, launch

    left = []

    def fake_exit(code):
        left.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(launch.os, "_exit", fake_exit)
    monkeypatch.setattr(sys, "argv", ["scalelab", "hardware", "show", "V100-SXM2-16GB"])
    monkeypatch.setattr(entry, "opened_process_group", False)
    assert cli.main() == 0 and left == []  # not a rank: returns as usual
    monkeypatch.setattr(entry, "opened_process_group", True)
    with pytest.raises(SystemExit):
        cli.main()
    assert left == [0]
    # called from Python with its arguments: returns
    assert cli.main(["hardware", "show", "V100-SXM2-16GB"]) == 0 and left == [0]
    capsys.readouterr()
