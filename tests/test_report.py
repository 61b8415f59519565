import json
import re
import shutil
import subprocess

import pytest

from scalelab.cli import main
from scalelab.errors import UsageError
from scalelab.report import collect_inputs, render_report
from scalelab.results import write_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _profile(tmp_path, model="tests.toy_models:mlp"):
    return write_json(tmp_path / "profile.json", "profile", {
        "workload": {"model": model},
        "batches": [{"batch_size": b, "step_s": 0.001 * b, "samples_per_s": 1000.0,
                     "peak_memory_bytes": 1e6 * b} for b in (1, 2, 4)],
        "recommended_batch_size": 2, "memory_budget_bytes": 1e7,
        "algorithms": {"chosen": "default",
                       "candidates": [{"name": "default", "step_s": 0.002, "fits": True}]},
    })


def test_report_has_every_section_with_images(tmp_path):
    html = render_report(collect_inputs([_profile(tmp_path)]))
    assert html.count("data:image/png;base64,") == 2  # batch scaling + algorithms
    assert "Step time and memory against batch size" in html
    assert "http://" not in html and "https://" not in html  # nothing to fetch


def test_not_a_scalelab_file(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"a": 1}))
    assert main(["report", str(tmp_path / "x.json"), "--out", str(tmp_path / "r.html")]) == 2


def test_different_models_refused(tmp_path, capsys):
    a = _profile(tmp_path)
    b = write_json(tmp_path / "run.json", "run", {"config": {"model": "resnet18"}})
    with pytest.raises(UsageError, match="different models"):
        collect_inputs([a, b])
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different models" in err


def test_unwritable_output(tmp_path, capsys):
    (tmp_path / "blocker").write_text("")
    code = main(["report", str(_profile(tmp_path)), "--out",
                 str(tmp_path / "blocker" / "r.html")])
    assert code == 2 and "cannot write" in capsys.readouterr().err


def render_in_chromium(html_path, tmp_path):
    """Load the page headless; return (dom, screenshot path)."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=5000"]
    url = html_path.resolve().as_uri()
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True,
                         timeout=90).stdout
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1280,3000", url],
                   capture_output=True, timeout=90)
    return dom, shot


def assert_page_complete(dom, shot, recommendation_text):
    m = re.search(r'data-images="(\d+)" data-broken-images="(\d+)"', dom)
    assert m, "the page's load handler did not run"
    assert int(m.group(1)) >= 1 and int(m.group(2)) == 0
    assert recommendation_text in dom
    assert shot.exists() and shot.stat().st_size > 10_000


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium")
def test_hand_made_report_renders_in_chromium(tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(_profile(tmp_path)), "--out", str(out), "--quiet"]) == 0
    dom, shot = render_in_chromium(out, tmp_path)
    assert_page_complete(dom, shot, "Recommendation")


# Fields of the wrong kind in a hand-edited file: each was a traceback (exit 1) before
BAD_PROFILE_FIELDS = [("batches", 5), ("algorithms", "x"), ("warnings", 5)]


@pytest.mark.parametrize("key,value", BAD_PROFILE_FIELDS,
                         ids=[f"{k}={v!r}" for k, v in BAD_PROFILE_FIELDS])
def test_a_file_with_a_field_of_the_wrong_kind_is_named(tmp_path, capsys, key, value):
    data = json.loads(_profile(tmp_path).read_text())
    data[key] = value
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(data))
    good = write_json(tmp_path / "run.json", "run", {"config": {"model": "tests.toy_models:mlp"}})
    out = tmp_path / "r.html"
    assert main(["report", str(good), str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{bad}: cannot be reported: a field of the wrong kind" in err[0]
    assert not out.exists()


def test_a_fault_of_the_report_itself_is_not_blamed_on_a_file(tmp_path, monkeypatch):
    from scalelab.report import html

    real = html.render_report

    def fails_together(inputs, title=None):
        if len(inputs.sources) > 1:
            raise TypeError("the report's own fault")
        return real(inputs, title)

    monkeypatch.setattr(html, "render_report", fails_together)
    a = _profile(tmp_path)
    b = write_json(tmp_path / "run.json", "run", {"config": {"model": "tests.toy_models:mlp"}})
    with pytest.raises(TypeError, match="the report's own fault"):
        html.write_report([a, b], tmp_path / "r.html")
