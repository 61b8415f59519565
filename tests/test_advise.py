import json

import pytest

from scalelab import advise as advise_mod
from scalelab.cli import main
from scalelab.results import load_any

ARGS = ["tests.toy_profiler:small_cnn", "--input-shape", "3,16,16", "--num-classes", "4",
        "--batch-sizes", "2,4"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALELAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_advise_writes_report_and_reuses_profile(tmp_path, cache, capsys):
    out = tmp_path / "out"
    assert main(["advise", *ARGS, "--out", str(out), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert not first["profile_cached"]
    assert (out / "report.html").exists()
    kinds = sorted(load_any(f)[0] for f in first["files"])
    assert kinds.count("plan") == len(advise_mod.default_clusters()) >= 3
    assert "profile" in kinds
    html = (out / "report.html").read_text()
    assert "Recommendation" in html and "data:image/png;base64," in html
    # Same model, input, device and torch: the cached profile is used.
    assert main(["advise", *ARGS, "--out", str(out), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["profile_cached"]
    prof1 = load_any(cache / "profiles" / next((cache / "profiles").iterdir()).name)[1]
    assert prof1["workload"]["model"] == ARGS[0]
    # Another input shape is another profile.
    assert advise_mod.profile_key(advise_mod.WorkloadSpec(ARGS[0], input_shape=(3, 16, 16)),
                                  "cpu") != advise_mod.profile_key(
        advise_mod.WorkloadSpec(ARGS[0], input_shape=(3, 32, 32)), "cpu")


def test_advise_unwritable_out(tmp_path, cache, capsys):
    (tmp_path / "f").write_text("")
    assert main(["advise", *ARGS, "--out", str(tmp_path / "f" / "x"), "--quiet"]) == 2
    assert "cannot create" in capsys.readouterr().err


def test_advise_bad_cluster(tmp_path, cache, capsys):
    (tmp_path / "c.toml").write_text("nodes = 0\nnetwork = '10GbE'\n")
    assert main(["advise", *ARGS, "--cluster", str(tmp_path / "c.toml"),
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "nodes" in capsys.readouterr().err
