"""The --help examples run from any folder: their toy models ship in the package."""

import re
import subprocess
import sys

import scalelab.toys
from scalelab.cli import compare, hardware, profile, validate


def test_every_toy_model_named_in_a_help_text_is_in_the_package():
    named = set()
    for mod in (compare, profile, validate):
        named |= set(re.findall(r"scalelab\.toys:(\w+)", mod.EPILOG))
        assert "tests.toy" not in mod.EPILOG
    assert named >= {"alexnet_like", "wide_fc", "smallconv"}
    assert all(callable(getattr(scalelab.toys, n)) for n in named)


def test_a_help_example_runs_from_a_temporary_folder(tmp_path):
    line = next(x.strip() for x in profile.EPILOG.splitlines() if "scalelab.toys:" in x)
    argv = line.split()[1:]  # scalelab profile scalelab.toys:smallconv --input-shape ...
    r = subprocess.run([sys.executable, "-m", "scalelab", *argv, "--batch-sizes", "2",
                        "--algorithms", "none", "--steps", "1", "--quiet", "--out", "p.json"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "p.json").is_file()


def test_hardware_list_names_the_example_clusters():
    names = [r["name"] for r in hardware.example_clusters()]
    assert "cluster-4x8-a100-100gbe" in names and "cluster-16x-10gbe-ps" in names
