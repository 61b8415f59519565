"""One story: the report's headline, tiles and launch command say what the terminal says,
from the same recommendation (plan.json), including a step too small for the cluster."""

from __future__ import annotations

import re
import shutil
from html import unescape

import pytest

from scalelab.cli import main
from scalelab.plan import story
from scalelab.report import write_report
from scalelab.results import read_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CLUSTER = ["--nodes", "4", "--gpus-per-node", "8", "--network", "100GbE", "--intra-node",
           "nvlink3"]


def _plan(capsys, tmp_path, step_s: float, *extra, cluster=CLUSTER):
    w = tmp_path / "w.toml"
    w.write_text(f'model = "resnet18"\nbatch_size = 32\nstep_s = {step_s}\n')
    out = tmp_path / "plan.json"
    code = main(["plan", "--workload", str(w), *cluster, *extra, "--out", str(out), "--quiet"])
    text, err = capsys.readouterr()
    assert code == 0, err
    return text.strip(), read_json(out, "plan"), out


def _card(html: str) -> str:
    sec = html[html.index('id="recommendation"'):]
    return sec[:sec.index("</section>")]


def _headline(html: str) -> str:
    m = re.search(r'<p class="headline">(.*?)</p>', _card(html), re.S)
    assert m, "the card has no headline"
    return unescape(m.group(1)).strip()


def _tiles(html: str) -> dict[str, str]:
    pairs = re.findall(r'<div class="k">(.*?)</div><div class="v">(.*?)</div>', _card(html),
                       re.S)
    return {unescape(k): unescape(re.sub(r"<wbr>", "", v)) for k, v in pairs}


def test_a_step_too_small_for_the_cluster_reads_the_same_on_both_pages(capsys, tmp_path):
    line, data, path = _plan(capsys, tmp_path, 0.0005)
    rec = data["recommendation"]
    assert rec["too_small"]
    html = write_report([path], tmp_path / "report.html").read_text()
    assert line == story.headline(data)
    assert line.startswith("recommend batch 32: one step takes")
    assert _headline(html) == story.headline(data, alternatives=False) == line
    tiles = _tiles(html)
    # no throughput, devices, architecture or network the terminal does not give
    assert set(tiles) == {"batch size / device", "computation", "step"}
    assert "Alternatives" not in _card(html)
    # the figure and its table say the same: the curves are bounds, nothing is recommended
    scaling = html[html.index('id="scaling"'):]
    scaling = scaling[:scaling.index("</section>")]
    assert "too small for the cluster to matter" in scaling and "(recommended)" not in scaling


def test_headline_tiles_and_launch_are_the_plans(capsys, tmp_path):
    line, data, path = _plan(capsys, tmp_path, 0.2, "--architecture", "hierarchical")
    rec = data["recommendation"]
    html = write_report([path], tmp_path / "report.html").read_text()
    head = _headline(html)
    assert line.startswith(head.split(";")[0].rstrip())  # the terminal adds alternatives
    assert head == story.headline(data, alternatives=False)
    assert f"recommend {rec['architecture']} on {rec['gpus']} GPUs" in head
    assert f"{rec['samples_per_s']:,.0f}" in head
    tiles = _tiles(html)
    assert tiles["architecture"] == rec["architecture"] == "hierarchical"
    assert tiles["devices"] == f"{rec['gpus']} of 32"
    assert tiles["samples/s"] == f"{rec['samples_per_s']:,.0f}"
    assert "network for all 32" in tiles  # the need is for the whole cluster, named so
    # the command runs what the card says, or says what it runs instead
    launch = unescape(re.search(r"<code>(.*?)</code>", _card(html), re.S).group(1))
    assert launch == rec["launch"]
    assert "no hierarchical mode" in launch and "--architecture allreduce" in launch


def test_one_device_has_no_architecture_and_no_cheapest_server_layout(capsys, tmp_path):
    # a link so slow that two devices already miss the target: one device is cheapest
    line, data, path = _plan(capsys, tmp_path, 0.2, "--price-per-gpu-hour", "2",
                             cluster=["--nodes", "4", "--gpus-per-node", "8", "--network-gbps",
                                      "0.01", "--intra-node-gbps", "0.01"])
    rec = data["recommendation"]
    assert rec["gpus"] == 1
    assert rec["cheapest"]["gpus"] == 1 and rec["cheapest"]["architecture"] is None
    assert any("cheapest meeting the target at its largest scale: 1 GPU alone" in r
               for r in rec["reasons"])
    assert not any(" on 1 GPU " in a["label"] or a["gpus"] == 1 and a["label"].endswith(")")
                   for a in rec["alternatives"])
    tiles = _tiles(write_report([path], tmp_path / "report.html").read_text())
    assert tiles["architecture"] == "- (one device)"
    assert line.startswith("recommend 1 GPU at batch 32")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium")
def test_the_headline_a_browser_shows_is_plan_json(capsys, tmp_path):
    from tests.test_report_browser import render_in_chromium

    _, data, path = _plan(capsys, tmp_path, 0.0005)
    out = write_report([path], tmp_path / "report.html")
    dom, _ = render_in_chromium(out, tmp_path)
    assert _headline(dom) == story.headline(data, alternatives=False)
    assert set(_tiles(dom)) == {"batch size / device", "computation", "step"}


def test_a_one_device_cluster_names_no_architecture_on_either_page(capsys, tmp_path):
    line, data, path = _plan(capsys, tmp_path, 0.2,
                             cluster=["--nodes", "1", "--gpus-per-node", "1",
                                      "--device", "H200"])
    rec = data["recommendation"]
    assert rec["gpus"] == 1
    html = write_report([path], tmp_path / "report.html").read_text()
    assert line.startswith("recommend 1 GPU at batch 32: ")
    assert _headline(html) == story.headline(data, alternatives=False)
    assert _headline(html).startswith("recommend 1 GPU at batch 32: ")
    assert not any(f"recommend {a} " in line for a in ("ps", "allreduce", "hierarchical"))
    assert _tiles(html)["architecture"] == "- (one device)"
