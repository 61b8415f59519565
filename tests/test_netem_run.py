"""``scalelab run --emulate-network``: real ranks in their own namespaces, nothing left after."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from scalelab import netem
from tests.test_netem import default_sigint, left_by

pytestmark = pytest.mark.netem

TINY = ["tests.toy_validate:tiny", "--input-shape", "12", "--num-classes", "4"]
FAULTY = ["tests.toy_runner:faulty", "--input-shape", "6", "--num-classes", "3"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pids(d) -> list[int]:
    return [int(p.read_text()) for p in d.glob("*.pid")]


def _scalelab(*args, env=None, timeout=120):
    """Run the CLI; returns (completed process, launcher pid) so its namespaces can be found."""
    p = subprocess.Popen([sys.executable, "-m", "scalelab", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    out, err = p.communicate(timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), p.pid


def test_emulated_run_completes_and_leaves_nothing(tmp_path):
    out = tmp_path / "run.json"
    proc, pid = _scalelab("run", *TINY, "--workers", "2", "--ps", "1", "--steps", "4",
                     "--batch-size", "4", "--emulate-network", "200mbit", "--quiet",
                     "--device", "cpu", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    run = json.loads(out.read_text())
    assert run["schema"] == "scalelab.run/1"
    assert run["network"] == {"rate_bps": 200_000_000, "hosts": 3}
    assert run["steps"]["step_s"]["median"] > 0
    assert left_by(pid) == []


def test_emulated_run_with_a_killed_rank_exits_1_and_leaves_nothing(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    proc, pid = _scalelab("run", *FAULTY, "--workers", "2", "--ps", "1", "--steps", "6",
                     "--batch-size", "4", "--emulate-network", "200mbit", "--timeout", "20",
                     "--quiet", "--device", "cpu", "--out", str(tmp_path / "run.json"),
                     env={"TOY_FAIL": "1:2:kill", "TOY_PID_DIR": str(pid_dir)})
    assert proc.returncode == 1, proc.stderr
    assert "rank 1" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert len(_pids(pid_dir)) == 3
    time.sleep(0.2)
    assert not [p for p in _pids(pid_dir) if _alive(p)]
    assert left_by(pid) == []


def test_interrupted_emulated_run_leaves_nothing(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    launcher = subprocess.Popen(
        [sys.executable, "-m", "scalelab", "run", *FAULTY, "--workers", "2", "--ps", "1",
         "--steps", "1000000", "--batch-size", "4", "--emulate-network", "500mbit", "--quiet",
         "--device", "cpu", "--out", str(tmp_path / "run.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TOY_PID_DIR": str(pid_dir)}, preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    while len(_pids(pid_dir)) < 3 and time.monotonic() < deadline and launcher.poll() is None:
        time.sleep(0.1)
    assert len(_pids(pid_dir)) == 3, launcher.stderr.read() if launcher.poll() is not None else ""
    assert any(n.startswith(f"{netem.PREFIX}{launcher.pid}x") for n in netem.list_namespaces())
    time.sleep(0.5)  # training
    launcher.send_signal(signal.SIGINT)
    _, err = launcher.communicate(timeout=60)
    assert launcher.returncode != 0
    assert "Traceback" not in err
    time.sleep(0.2)
    assert not [p for p in _pids(pid_dir) if _alive(p)]
    assert left_by(launcher.pid) == []
