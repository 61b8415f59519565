"""``scalelab compare --algorithm``: every timing and run of the comparison trains in it."""

import pytest

from scalelab.cli import main
from scalelab.errors import UsageError
from scalelab.experiment import compare as compare_mod
from scalelab.experiment.compare import CompareOptions, _options


def test_the_algorithm_reaches_the_options_and_the_file_form(monkeypatch, tmp_path):
    seen = {}

    def fake_compare(spec, options, progress=None):
        seen["options"] = options
        raise UsageError("stop here")  # the CLI turns it into one line, exit 2

    monkeypatch.setattr(compare_mod, "compare", fake_compare)
    code = main(["compare", "tests.toy_compare:wide_fc", "--input-shape", "3,16,16",
                 "--num-classes", "10", "--workers", "2", "--algorithm", "channels_last",
                 "--quiet", "--out", str(tmp_path / "c.json")])
    assert code == 2
    assert seen["options"].algorithm == "channels_last"
    assert _options(seen["options"])["algorithm"] == "channels_last"
    assert CompareOptions(workers=2).algorithm == "default"


@pytest.mark.parametrize("name, message", [("warp_speed", "warp_speed"),
                                           ("fp16_autocast", "loss scaling")])
def test_unknown_and_refused_algorithms_are_one_line_exit_2(capsys, tmp_path, name, message):
    with pytest.raises(UsageError, match=message):
        CompareOptions(workers=2, algorithm=name)
    code = main(["compare", "tests.toy_compare:wide_fc", "--input-shape", "3,16,16",
                 "--num-classes", "10", "--workers", "2", "--algorithm", name, "--quiet",
                 "--out", str(tmp_path / "c.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and message in err[0], err
