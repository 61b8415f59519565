"""Emulated networks need root: without it, validate and run refuse in one line, exit 2.

Run as root (as CI does), the command is started as user ``nobody`` through ``setpriv``.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = ["tests.toy_validate:tiny", "--input-shape", "12", "--num-classes", "4"]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to start a command as an unprivileged user")


def _as_nobody(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": "/tmp", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
         "scalelab", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [
    ["validate", *TINY, "--grid", "workers=2 rate=200mbit", "--out", "/tmp/never-written.json"],
    ["run", *TINY, "--workers", "2", "--steps", "2", "--emulate-network", "200mbit",
     "--out", "/tmp/never-written.json"],
], ids=["validate", "run"])
@pytest.mark.slow
def test_a_rate_without_root_exits_2_in_one_line(command):
    proc = _as_nobody(*command)
    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stderr
    assert len(err.splitlines()) == 1 and "root" in err, err
    assert "Traceback" not in proc.stderr

