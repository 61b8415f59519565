"""The report as a reader sees it: cluster on every card, alternatives, captions that match
the figures, legends outside the data, a band column; rendered in headless Chromium."""

import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from scalelab.report import collect_inputs, render_report
from scalelab.report.cards import sweep_rows
from scalelab.report.html import batch_caption, scaling_caption
from scalelab.results import write_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium")


def _profile(budget=1e12):
    return {"workload": {"model": "tests.toy_models:mlp"},
            "batches": [{"batch_size": b, "step_s": 0.001 * b, "samples_per_s": 1000.0 / b,
                         "peak_memory_bytes": 1e6 * b} for b in (1, 2, 4, 8)],
            "fit": {"step_s": {"intercept": 0.0, "per_sample": 0.001}},
            "recommended_batch_size": 2, "memory_budget_bytes": budget,
            "algorithms": {"chosen": "default",
                           "candidates": [{"name": "default", "step_s": 0.002, "fits": True}]}}


def _rows(arch, total, band=False):
    rows = []
    for g in range(1, total + 1):
        eff = 1 / (1 + 0.05 * (g - 1))
        row = {"gpus": g, "nodes": (g + 7) // 8, "architecture": arch, "num_ps": 0,
               "compute_s": 0.1, "comm_s": 0.1 / eff - 0.1, "io_s": 0.0, "step_s": 0.1 / eff,
               "samples_per_s": g * 32 * eff / 0.1, "speedup": g * eff, "efficiency": eff,
               "overhead_ratio": 1 / eff - 1, "bottleneck": "network"}
        if band:
            row.update(step_s_low=row["step_s"] * 0.9, step_s_high=row["step_s"] * 1.2)
        rows.append(row)
    return rows


def _plan(name, nodes, per_node, network, gpus, band=False):
    total = nodes * per_node
    sweep = _rows("allreduce", total, band) + _rows("ps", total)
    rec_row = next(r for r in sweep if r["gpus"] == gpus and r["architecture"] == "allreduce")
    return {"inputs": {"cluster_name": name, "input": {"model": "tests.toy_models:mlp"},
                       "cluster": {"nodes": nodes, "gpus_per_node": per_node,
                                   "device": "A100-SXM-80GB", "network": network},
                       "options": {"target_efficiency": 0.8}},
            "sweep": sweep, "warnings": [],
            "recommendation": {"batch_size": 32, "algorithm": None, "architecture": "allreduce",
                               "gpus": gpus, "num_ps": 0, "num_ps_min": 0,
                               "network_gbps_needed": 38.4, "loader_workers": 0,
                               "samples_per_s": rec_row["samples_per_s"],
                               "efficiency": rec_row["efficiency"], "reasons": ["r"]}}


def _files(tmp_path, band=False):
    return [write_json(tmp_path / "profile.json", "profile", _profile()),
            write_json(tmp_path / "plan-a.json", "plan", _plan("big", 4, 8, "100GbE", 5, band)),
            write_json(tmp_path / "plan-b.json", "plan", _plan("small", 1, 8, "10GbE", 2))]


class _Cards(HTMLParser):
    """Text of every recommendation card (section id recommendation*)."""

    def __init__(self):
        super().__init__()
        self.cards, self.depth = [], 0

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            if dict(attrs).get("id", "").startswith("recommendation"):
                self.cards.append("")
                self.depth = 1
            elif self.depth:
                self.depth += 1

    def handle_endtag(self, tag):
        if tag == "section" and self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.cards[-1] += data


def cards_of(html):
    p = _Cards()
    p.feed(html)
    return [" ".join(c.split()) for c in p.cards]


def test_every_card_names_its_cluster_and_alternatives(tmp_path):
    html = render_report(collect_inputs(_files(tmp_path)))
    cards = cards_of(html)
    assert len(cards) == 2
    assert "for 4 nodes x 8 A100-SXM-80GB, 100GbE" in cards[0]
    assert "for 1 node x 8 A100-SXM-80GB, 10GbE" in cards[1]
    assert "5 of 32" in cards[0] and "2 of 8" in cards[1]
    full = _rows("allreduce", 32)[-1]
    assert (f"all 32 GPUs (allreduce) would give {full['samples_per_s']:,.0f} samples/s at "
            f"efficiency {full['efficiency']:.2f}") in cards[0]
    assert "all 8 GPUs (allreduce) would give" in cards[1]
    assert "ps on the same 5 GPUs:" in cards[0]
    one = _plan("one", 1, 8, "10GbE", 1)
    html = render_report(collect_inputs([write_json(tmp_path / "one.json", "plan", one)]))
    assert "on the same 1 GPU" not in html and "all 8 GPUs (allreduce) would give" in html


def test_captions_match_the_figures():
    """The memory budget is named only when drawn; the dashed step line is the fit; dots
    only when there are measured runs."""
    far = batch_caption(_profile(budget=1e12))
    assert "budget" not in far and "linear fit (dashed)" in far
    assert "memory budget (dashed)" in batch_caption(_profile(budget=2e7))
    plans = [_plan("big", 4, 8, "100GbE", 5)]
    assert "Dots" not in scaling_caption(plans, [], [])
    runs = [{"config": {"workers": w, "architecture": "allreduce", "batch_size": 32},
             "samples_per_s": 100.0 * w} for w in (1, 2)]
    assert "Dots are measured runs" in scaling_caption(plans, runs, [])


def test_band_column_only_where_predictions_carry_one():
    rows, header = sweep_rows([_plan("big", 4, 8, "100GbE", 5, band=True)])
    assert "±" in header
    assert rows[0][header.index("±")] == "-10% / +20%"
    rows, header = sweep_rows([_plan("small", 1, 8, "10GbE", 2)])
    assert "±" not in header and all(len(r) == len(header) for r in rows)
    assert any("(recommended)" in r[0] for r in rows)


@pytest.fixture
def figure_log(monkeypatch):
    """Every figure the report draws, checked before it is saved."""
    from scalelab.report.figures import experiment, plan, profile

    drawn = []
    for mod in (profile, plan, experiment):
        original = mod._png

        def capture(fig, *a, _orig=original, **k):
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes
                                           if ax.get_legend() is not None]
            drawn.append([(lg.get_window_extent(renderer), [ax.get_window_extent(renderer)
                                                            for ax in fig.axes])
                          for lg in legends])
            return _orig(fig, *a, **k)

        monkeypatch.setattr(mod, "_png", capture)
    return drawn


def assert_legends_clear(drawn):
    assert drawn, "no figure was drawn"
    for legends in drawn:
        for legend, axes in legends:
            for ax in axes:
                assert not legend.overlaps(ax), "a legend lies over an axes' data area"


def test_legends_lie_outside_the_axes(tmp_path, figure_log):
    runs = [{"config": {"workers": w, "architecture": "allreduce", "batch_size": 32},
             "samples_per_s": 100.0 * w} for w in (1, 2)]
    files = _files(tmp_path) + [write_json(tmp_path / f"run{i}.json", "run", r)
                                for i, r in enumerate(runs)]
    render_report(collect_inputs(files))
    assert len(figure_log) >= 3
    assert_legends_clear(figure_log)


def render_in_chromium(html_path, tmp_path, height=3200):
    """Load the page headless; return (dom, screenshot path)."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=5000"]
    url = html_path.resolve().as_uri()
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True,
                         timeout=120).stdout
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", f"--window-size=1280,{height}",
                    url], capture_output=True, timeout=120)
    return dom, shot


def assert_rendered(dom, shot):
    m = re.search(r'data-images="(\d+)" data-broken-images="(\d+)"', dom)
    assert m, "the page's load handler did not run"
    assert int(m.group(1)) >= 3 and int(m.group(2)) == 0
    assert shot.exists() and shot.stat().st_size > 10_000


@pytest.mark.browser
@needs_chromium
def test_report_of_small_files_in_chromium(tmp_path, figure_log):
    from scalelab.report import write_report

    out = write_report(_files(tmp_path, band=True), tmp_path / "report.html")
    dom, shot = render_in_chromium(out, tmp_path)
    assert_rendered(dom, shot)
    cards = cards_of(dom)
    assert len(cards) == 2 and all(" for " in c and " x 8 A100-SXM-80GB, " in c
                                   for c in cards)
    assert all("would give" in c for c in cards)
    assert "-10% / +20%" in dom
    assert "budget" not in dom.split('id="batch"')[1].split("</section>")[0]
    assert_legends_clear(figure_log)


@pytest.mark.browser
@pytest.mark.dist
@needs_chromium
def test_report_of_a_real_small_advise_in_chromium(tmp_path, monkeypatch, figure_log):
    """Real files: a profile, plans for the example clusters and a --check run."""
    monkeypatch.setenv("SCALELAB_CACHE", str(tmp_path / "cache"))
    from scalelab.advise import AdviseOptions, advise
    from scalelab.profiler import ProfileOptions
    from scalelab.workload import WorkloadSpec

    spec = WorkloadSpec("tests.toy_profiler:small_cnn", input_shape=(3, 16, 16), num_classes=4)
    result = advise(spec, AdviseOptions(out_dir=str(tmp_path / "out"), check=True,
                                        check_steps=3,
                                        profile=ProfileOptions(batch_sizes=[2, 4])))
    assert result.check["check"]["measured_samples_per_s"] > 0
    dom, shot = render_in_chromium(result.report, tmp_path, height=5200)
    assert_rendered(dom, shot)
    cards = cards_of(dom)
    assert len(cards) == len(result.plans)
    for card, p in zip(cards, result.plans):
        c = p["inputs"]["cluster"]
        assert f"x {c['gpus_per_node']} {c['device']}, {c['network']}" in card
        rec = p["recommendation"]
        if rec["gpus"] < c["nodes"] * c["gpus_per_node"]:
            assert f"all {c['nodes'] * c['gpus_per_node']} GPUs" in card
    assert "check of the model on this machine" in dom
    assert_legends_clear(figure_log)


def test_a_check_is_labelled_as_a_check(tmp_path):
    case = {"config": {"workers": 2, "ps": None, "architecture": "allreduce",
                       "batch_size": 2, "rate": None},
            "predicted_step_s": 0.001, "measured_step_s": 0.002, "error": -0.5}
    check = {"cases": [case], "check": {
        "label": "a check of the model on this machine, not a validation of the plan for big",
        "ran": {"architecture": "allreduce", "workers": 2, "batch_size": 2},
        "why": "2 workers: the recommended 5 devices capped at 2 CPU cores",
        "predicted_samples_per_s": 4000.0, "measured_samples_per_s": 2000.0, "error": -0.5}}
    files = _files(tmp_path) + [write_json(tmp_path / "check.json", "validation", check)]
    html = render_report(collect_inputs(files))
    section = html.split('id="validation"')[1].split("</section>")[0]
    assert "Check of the model on this machine" in section
    assert "not a validation of the cluster plan" in section
    assert "workers=2 architecture=allreduce batch_size=2" in section and "None" not in section
    measured = html.split('id="measured"')[1].split("</section>")[0]
    assert "predicted 4,000.0 samples/s, measured 2,000.0 samples/s" in measured


def test_the_planners_alternatives_and_launch_on_the_card(tmp_path):
    plan = _plan("big", 4, 8, "100GbE", 5)
    plan["recommendation"]["alternatives"] = [
        {"label": "all 32", "gpus": 32, "architecture": "allreduce", "samples_per_s": 17453.2,
         "speedup": 23.0, "efficiency": 0.7199},
        {"label": "one node", "gpus": 8, "architecture": "allreduce", "samples_per_s": 6021.0,
         "speedup": 7.4, "efficiency": 0.93}]
    plan["recommendation"]["launch"] = "torchrun --nnodes 1 --nproc-per-node 5 -m scalelab run"
    html = render_report(collect_inputs([write_json(tmp_path / "p.json", "plan", plan)]))
    card = cards_of(html)[0]
    assert "all 32: allreduce on 32 GPUs would give 17,453 samples/s at efficiency 0.71" in card
    assert "one node: allreduce on 8 GPUs would give 6,021 samples/s at efficiency 0.93" in card
    assert "torchrun --nnodes 1 --nproc-per-node 5 -m scalelab run" in card
    plan["recommendation"].update(samples_per_s_low=900.0, samples_per_s_high=2100.5)
    html = render_report(collect_inputs([write_json(tmp_path / "p.json", "plan", plan)]))
    rate = plan["recommendation"]["samples_per_s"]
    assert f"{rate:,.0f} (900-2,100)" in cards_of(html)[0]
