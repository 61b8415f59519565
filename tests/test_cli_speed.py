"""The command line stays light: parsers without torch, a plan from cached counts.

Wall times are measured by ``benchmarks/plan_speed.py``, not asserted here (the machine is
shared); these tests check what makes them small: what ``--help`` imports, and that a plan
whose model was counted before counts nothing again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalelab import opcache, opcount, workload
from scalelab.cli import main
from scalelab.hardware import fit as fitmod

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torchvision", "matplotlib", "jinja2")


def _imported_by(argv: list[str]) -> dict:
    """Which heavy modules a fresh interpreter holds after ``scalelab ARGV`` returns."""
    code = (
        "import json, sys\n"
        "from scalelab.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["plan", "--help"], ["advise", "--help"],
                                  ["profile", "--help"], ["run", "--help"]])
def test_help_imports_no_heavy_library(argv):
    assert _imported_by(argv) == {m: False for m in HEAVY}


def test_importtime_of_help_has_no_torch():
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "scalelab", "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    modules = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
               if line.startswith("import time:")}
    assert "scalelab.cli" in modules  # the check sees what it should
    assert not modules & {"torch", "torchvision"}


def test_a_cached_plan_counts_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SCALELAB_CACHE", raising=False)
    monkeypatch.setenv("SCALELAB_CACHE_DIR", str(tmp_path / "cache"))
    opcache.clear_memory()
    argv = ["plan", "--workload", str(ROOT / "examples" / "workload.toml"), "--cluster",
            str(ROOT / "examples" / "cluster-4x8-a100-100gbe.toml"), "--json"]
    try:
        assert main([*argv, "--out", str(tmp_path / "a.json")]) == 0
        first = capsys.readouterr().out
        kinds = {p.parent.name for p in (tmp_path / "cache").glob("*/*.pkl")}
        assert kinds == {"ops", "describe", "fit"}
        opcache.clear_memory()  # what a new process would know: the disk cache only
        calls = []

        def forbid(name):
            def counted(*args, **kwargs):
                calls.append(name)
                raise AssertionError(f"{name} ran with a warm cache")
            return counted

        monkeypatch.setattr(opcount, "step_ops", forbid("step_ops"))
        monkeypatch.setattr(workload, "describe", forbid("describe"))
        monkeypatch.setattr(fitmod, "fit", forbid("fit"))
        monkeypatch.setattr(fitmod, "bands", forbid("bands"))
        assert main([*argv, "--out", str(tmp_path / "b.json")]) == 0
        assert calls == []
        assert capsys.readouterr().out == first
    finally:
        opcache.clear_memory()
