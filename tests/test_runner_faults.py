"""A rank that raises, dies or hangs stops the whole job: exit 1, the rank named, no orphans."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scalelab.errors import RunFailure
from scalelab.runner import RunConfig, run_training
from scalelab.workload import WorkloadSpec

pytestmark = pytest.mark.dist

REPO = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _pids(d: Path) -> list[int]:
    return [int(f.stem) for f in d.glob("*.pid")]


def test_cli_exits_1_naming_the_rank_that_raised(tmp_path):
    env = {**os.environ, "TOY_FAIL": "1:2:raise", "TOY_PID_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "scalelab", "run", "tests.toy_runner:faulty", "--input-shape",
         "6", "--num-classes", "3", "--workers", "2", "--ps", "1", "--steps", "6",
         "--batch-size", "4", "--timeout", "20", "--quiet", "--device", "cpu",
         "--out", str(tmp_path / "r.json")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "rank 1 (worker 1) failed" in lines[0]
    assert "injected failure at step 2" in lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r.json").exists()
    pids = _pids(tmp_path)
    assert len(pids) == 3
    assert not [p for p in pids if _alive(p)]


@pytest.mark.parametrize("action,expected", [
    ("kill", "rank 1 (worker 1) failed: died (killed by SIGKILL)"),
    ("hang", "rank 1 (worker 1) stopped responding"),
])
def test_a_dead_or_hung_rank_stops_every_other_rank(action, expected, tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_FAIL", f"1:2:{action}")
    monkeypatch.setenv("TOY_PID_DIR", str(tmp_path))
    spec = WorkloadSpec("tests.toy_runner:faulty", input_shape=(6,), num_classes=3)
    t0 = time.monotonic()
    with pytest.raises(RunFailure) as e:
        run_training(RunConfig(workload=spec, workers=2, ps=1, steps=6, batch_size=4,
                               timeout_s=5, device="cpu"))
    took = time.monotonic() - t0
    assert str(e.value).startswith(expected), str(e.value)
    assert took < 60
    pids = _pids(tmp_path)
    assert len(pids) == 3
    assert not [p for p in pids if _alive(p)]
