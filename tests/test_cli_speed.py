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

from scalelab import opcache, opcount
from scalelab.cli import main
from scalelab.hardware import bands as bandsmod
from scalelab.hardware import fit as fitmod
from scalelab.hardware import packaged
from scalelab.plan import layouts
from scalelab.profiler import memory as profiler_memory

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


@pytest.mark.slow  # with nothing counted yet, the first plan counts the workload's model
def test_a_cached_plan_counts_nothing(tmp_path, monkeypatch, capsys):
    """The session's cache folder (tests/conftest.py), the package's fit: the second plan
    reads every count from the disk."""
    monkeypatch.delenv("SCALELAB_CACHE", raising=False)
    opcache.clear_memory()
    argv = ["plan", "--workload", str(ROOT / "examples" / "workload.toml"), "--cluster",
            str(ROOT / "examples" / "cluster-4x8-a100-100gbe.toml"), "--json"]
    try:
        assert main([*argv, "--out", str(tmp_path / "a.json")]) == 0
        first = capsys.readouterr().out
        kinds = {p.parent.name for p in opcache.cache_dir().glob("*/*.pkl")}
        assert {"ops", "describe", "memory"} <= kinds
        assert packaged.current() is not None  # the fit is the package's (hardware/fit.json)
        opcache.clear_memory()  # what a new process would know: the disk cache only
        layouts._components_of.cache_clear()
        calls = []

        def forbid(name):
            def counted(*args, **kwargs):
                calls.append(name)
                raise AssertionError(f"{name} ran with a warm cache")
            return counted

        monkeypatch.setattr(opcount, "step_ops", forbid("step_ops"))
        monkeypatch.setattr(opcount, "describe", forbid("describe"))
        monkeypatch.setattr(fitmod, "fit", forbid("fit"))
        monkeypatch.setattr(bandsmod, "bands", forbid("bands"))
        monkeypatch.setattr(profiler_memory, "try_memory_components", forbid("memory"))
        assert main([*argv, "--out", str(tmp_path / "b.json")]) == 0
        assert calls == []
        assert capsys.readouterr().out == first
    finally:
        opcache.clear_memory()


@pytest.mark.slow
def test_a_cached_plan_imports_no_torch(tmp_path):
    env = {**os.environ}
    env.pop("SCALELAB_CACHE", None)
    argv = ["plan", "--workload", str(ROOT / "examples" / "workload.toml"), "--cluster",
            str(ROOT / "examples" / "cluster-4x8-a100-100gbe.toml"), "--out",
            str(tmp_path / "plan.json"), "--quiet"]
    subprocess.run([sys.executable, "-m", "scalelab", *argv], env=env, cwd=tmp_path,
                   check=True, capture_output=True, timeout=300)  # counts, fills the cache
    code = ("import sys\nfrom scalelab.cli import main\n"
            f"assert main({argv!r}) == 0\nprint('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
