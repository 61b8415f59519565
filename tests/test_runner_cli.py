"""`scalelab run` on the command line: what it says about its own measurement."""

import json

import pytest

from scalelab.cli import main


@pytest.mark.dist
def test_too_few_timed_steps_are_said_not_hidden(tmp_path, capsys):
    out = tmp_path / "run.json"
    code = main(["run", "tests.toy_runner:wide", "--input-shape", "6", "--num-classes", "3",
                 "--workers", "1", "--steps", "3", "--device", "cpu", "--quiet",
                 "--out", str(out)])
    assert code == 0
    err = capsys.readouterr().err
    assert "1 timed step(s) after 2 warm-up" in err
    data = json.loads(out.read_text())
    assert data["timed_steps"] == 1 and data["warmup_steps_used"] == 2
