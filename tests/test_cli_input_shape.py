"""A malformed or mismatched --input-shape is a usage error (one line, exit 2) in every
command that takes one, found before any process starts or anything is measured."""

import subprocess
import sys

import pytest

from scalelab.cli import main

COMMANDS = {
    "profile": ["--batch-sizes", "2", "--algorithms", "none", "--quiet"],
    "run": ["--workers", "1", "--steps", "2", "--quiet"],
    "validate": ["--grid", "workers=1 batch_size=2", "--steps", "2"],
    "compare": ["--workers", "2", "--steps", "4", "--quiet"],
    "advise": ["--quiet"],
}
SHAPES = {
    "3,32": "does not take --input-shape 3,32",  # 2-D where resnet18 wants C,H,W
    "3,x,32": "malformed input shape",
    "0,32,32": "every dimension must be > 0",
    "3,-1,32": "every dimension must be > 0",
    "": "malformed input shape",
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_malformed_input_shape_is_one_line_exit_2(command, shape, tmp_path, monkeypatch,
                                                  capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCALELAB_CACHE", str(tmp_path / "cache"))
    argv = [command, "resnet18", "--input-shape", shape, *COMMANDS[command]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert SHAPES[shape] in err and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing was written


@pytest.mark.slow
def test_run_with_a_2d_shape_fails_before_processes_start(tmp_path):
    """The whole command, as a user runs it: one line on stderr, exit 2, and fast."""
    proc = subprocess.run(
        [sys.executable, "-m", "scalelab", "run", "resnet18", "--input-shape", "3,32",
         "--workers", "2", "--steps", "2", "--out", str(tmp_path / "run.json")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "does not take --input-shape 3,32" in proc.stderr
    assert not (tmp_path / "run.json").exists()


def test_a_model_that_takes_the_shape_passes(tmp_path):
    from scalelab.workload import WorkloadSpec, check_workload

    check_workload(WorkloadSpec("resnet18", input_shape=(3, 32, 32), num_classes=10))
    check_workload(WorkloadSpec("tests.toy_models:mlp", input_shape=(6,), num_classes=3))
