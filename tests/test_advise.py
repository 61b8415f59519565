import json
import os
import tomllib
from pathlib import Path

import pytest

import scalelab
from scalelab import advise as advise_mod
from scalelab.cli import build_parser, main
from scalelab.cli.advise import recommendation_line
from scalelab.profiler import ProfileOptions
from scalelab.results import load_any, read_json, write_json
from scalelab.workload import WorkloadSpec

ARGS = ["tests.toy_profiler:small_cnn", "--input-shape", "3,16,16", "--num-classes", "4",
        "--batch-sizes", "2,4"]
SPEC = WorkloadSpec("tests.toy_profiler:small_cnn", input_shape=(3, 16, 16), num_classes=4)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALELAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def quiet_machine(monkeypatch):
    """The profiler reads the load average: an idle machine."""
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))


@pytest.fixture
def busy_machine(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (40.0, 40.0, 40.0))


@pytest.mark.slow
def test_advise_writes_report_and_reuses_profile(tmp_path, cache, quiet_machine, capsys):
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
    # Same model, input, device, torch and options: the cached profile is used.
    assert main(["advise", *ARGS, "--out", str(out), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["profile_cached"]
    prof1 = load_any(cache / "profiles" / next((cache / "profiles").iterdir()).name)[1]
    assert prof1["workload"]["model"] == ARGS[0]


@pytest.mark.slow
def test_busy_profile_is_not_cached(tmp_path, cache, busy_machine, capsys):
    """A profile measured while other jobs ran is used once, flagged, and measured again
    next time (it is never written to the cache)."""
    out = tmp_path / "out"
    for _ in range(2):
        assert main(["advise", *ARGS, "--out", str(out), "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert not got["profile_cached"]
        assert "busy" in got["profile_note"]
        assert any("busy" in w for w in got["warnings"])
    assert not (cache / "profiles").exists() or not list((cache / "profiles").iterdir())


@pytest.mark.slow
def test_busy_cache_entry_is_measured_again(tmp_path, quiet_machine):
    """A cache entry that says it was measured on a busy machine is not reused."""
    opts = ProfileOptions(batch_sizes=[2])
    first = advise_mod.cached_profile(SPEC, opts, directory=tmp_path)
    assert not first.cached and first.path.exists()
    assert advise_mod.cached_profile(SPEC, opts, directory=tmp_path).cached
    write_json(first.path, "profile", {**first.profile, "machine_busy": True})
    again = advise_mod.cached_profile(SPEC, opts, directory=tmp_path)
    assert not again.cached and "busy" in again.note
    assert not read_json(first.path, "profile").get("machine_busy")


@pytest.mark.parametrize("change", [
    {"batch_sizes": [2, 8]}, {"max_batch": 64}, {"memory_budget_bytes": 2**30},
    {"algorithms": "none"}, {"steps": 7}, {"warmup": 2}, {"seed": 1}, {"max_trials": 8},
])
def test_cache_key_holds_every_profiling_option(change):
    base = {"batch_sizes": [2, 4]}
    assert advise_mod.profile_key(SPEC, ProfileOptions(**base)) == \
        advise_mod.profile_key(SPEC, ProfileOptions(**base))
    assert advise_mod.profile_key(SPEC, ProfileOptions(**base)) != \
        advise_mod.profile_key(SPEC, ProfileOptions(**{**base, **change}))


def test_cache_key_holds_workload_and_data(tmp_path):
    opts = ProfileOptions(batch_sizes=[2])
    other = WorkloadSpec(SPEC.model, input_shape=(3, 32, 32), num_classes=4)
    assert advise_mod.profile_key(SPEC, opts) != advise_mod.profile_key(other, opts)
    ident = advise_mod.profile_identity(SPEC, opts)
    assert ident["device"] == "cpu" and ident["data"] == "synthetic"


@pytest.mark.slow
def test_console_shows_every_warning(tmp_path, cache, busy_machine, capsys):
    """Every warning the report shows (the profile's, each plan's) is on the console."""
    cluster = tmp_path / "c.toml"
    cluster.write_text('nodes = 2\ngpus_per_node = 4\nnetwork = "10GbE"\n')
    out = tmp_path / "out"
    assert main(["advise", *ARGS, "--cluster", str(cluster), "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    prof = read_json(out / "profile.json", "profile")
    plan = read_json(out / "plan-c.json", "plan")
    assert prof["warnings"] and plan["warnings"]
    for w in prof["warnings"] + plan["warnings"]:
        assert " ".join(w.split()) in text
    assert "not cached" in text


@pytest.mark.slow
def test_cluster_by_example_name_from_any_folder(tmp_path, cache, quiet_machine,
                                                 monkeypatch, capsys):
    root = str(Path(__file__).resolve().parents[1])  # where the toy model's module lives
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(root)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p))
    assert main(["advise", *ARGS, "--cluster", "cluster-1x8-pcie", "--out", "o",
                 "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert list(got["recommendations"]) == ["cluster-1x8-pcie"]
    assert main(["advise", *ARGS, "--cluster", "no-such-cluster", "--out", "o", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cluster-1x8-pcie" in err


def test_examples_ship_inside_the_package():
    """The examples advise uses live in the package and are declared as package data, so a
    non-editable install has them."""
    assert advise_mod.EXAMPLES_DIR.parent == Path(scalelab.__file__).resolve().parent
    assert len(advise_mod.default_clusters()) >= 3
    root = Path(__file__).resolve().parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())
    assert "examples/*.toml" in data["tool"]["setuptools"]["package-data"]["scalelab"]


def test_advise_unwritable_out(tmp_path, cache, capsys):
    (tmp_path / "f").write_text("")
    assert main(["advise", *ARGS, "--out", str(tmp_path / "f" / "x"), "--quiet"]) == 2
    assert "cannot create" in capsys.readouterr().err


def test_advise_bad_cluster(tmp_path, cache, capsys):
    (tmp_path / "c.toml").write_text("nodes = 0\nnetwork = '10GbE'\n")
    assert main(["advise", *ARGS, "--cluster", str(tmp_path / "c.toml"),
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "nodes" in capsys.readouterr().err


def _plan(**rec):
    base = {"batch_size": 8, "algorithm": None, "architecture": "allreduce", "gpus": 1,
            "num_ps": 0, "num_ps_min": 0, "network_gbps_needed": 2590.4, "samples_per_s": 10.0,
            "efficiency": 1.0}
    return {"inputs": {"cluster_name": "c", "cluster": {"nodes": 1, "gpus_per_node": 8,
                                                        "device": "A100", "network": "10GbE"},
                       "options": {"max_gpus": 8, "target_efficiency": 0.8}},
            "recommendation": {**base, **rec}}


def test_console_line_plurals_units_and_cluster():
    # the report's headline (scalelab.plan.story), after the cluster
    one = recommendation_line(_plan())
    assert "recommend 1 GPU at batch" in one and "1 GPUs" not in one and "allreduce" not in one
    assert "8 devices at efficiency 0.8 need 2,590 Gb/s" in one and "e+" not in one
    assert "1 node x 8 A100, 10GbE" in one
    ps = recommendation_line(_plan(architecture="ps", gpus=8, num_ps=1, num_ps_min=1))
    assert "recommend ps on 8 GPUs" in ps and "1 parameter server " in ps
    alone = recommendation_line(_plan(architecture="ps", gpus=1, num_ps=0, num_ps_min=0))
    assert "parameter server" not in alone
    small = recommendation_line(_plan(too_small="one step takes 1.6 ms: too small"))
    assert small.endswith("one step takes 1.6 ms: too small") and "samples/s" not in small


def test_every_help_shows_its_defaults():
    """Each option with a default says it in --help, in every subcommand."""
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        text = p.format_help()
        for action in p._actions:
            d = action.default
            if not action.option_strings or d in (None, False, argparse.SUPPRESS, []):
                continue
            assert str(d) in text or "default" in (action.help or ""), (name, action.dest)


@pytest.mark.parametrize("rec,hosts,want", [
    ({"architecture": "allreduce", "gpus": 8, "batch_size": 16}, 2, ("allreduce", 2, 0)),
    ({"architecture": "hierarchical", "gpus": 32, "batch_size": 16}, 16,
     ("allreduce", 16, 0)),
    ({"architecture": "allreduce", "gpus": 1, "batch_size": 16}, 8, ("allreduce", 1, 0)),
    ({"architecture": "ps", "gpus": 16, "num_ps": 7, "batch_size": 4}, 2, ("ps", 1, 1)),
    ({"architecture": "ps", "gpus": 16, "num_ps": 7, "batch_size": 4}, 16, ("ps", 9, 7)),
    ({"architecture": "ps", "gpus": 3, "num_ps": 1, "batch_size": 4}, 16, ("ps", 3, 1)),
])
def test_check_runs_the_recommendation_at_what_this_machine_hosts(rec, hosts, want):
    s = advise_mod.check_setup(rec, hosts, f"{hosts} CPU cores")
    assert (s.architecture, s.workers, s.ps) == want
    assert s.batch_size == rec["batch_size"]
    assert s.workers + s.ps <= max(hosts, 2)
    assert f"{hosts} CPU cores" in s.why


@pytest.mark.dist
def test_check_predicts_what_it_ran(tmp_path, cache, quiet_machine, capsys):
    """--check runs the recommended architecture and batch at this machine's worker count,
    with the model's prediction for exactly that run, labelled as a check of the model."""
    out = tmp_path / "out"
    assert main(["advise", *ARGS, "--cluster", "cluster-1x8-pcie", "--out", str(out),
                 "--check", "--check-steps", "3"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    check = read_json(out / "check.json", "validation")
    c = check["check"]
    plan = read_json(out / "plan-cluster-1x8-pcie.json", "plan")
    rec = plan["recommendation"]
    case = check["cases"][0]
    assert case["config"]["batch_size"] == rec["batch_size"] == c["ran"]["batch_size"]
    want = advise_mod.check_setup(rec, *advise_mod.host_capacity(
        ProfileOptions().torch_device))
    assert case["config"]["workers"] == want.workers
    assert c["predicted_samples_per_s"] > 0 and c["measured_samples_per_s"] > 0
    assert "check of the model on this machine" in text
    assert "not a validation of the plan for cluster-1x8-pcie" in text
    assert f"predicted {c['predicted_samples_per_s']:,.1f} samples/s" in text
    html = (out / "report.html").read_text()
    assert "check of the model on this machine" in html


def test_compare_table_whole_when_piped():
    """Piped (not a terminal, 80 columns), the compare table keeps its error column."""
    import io

    from rich.console import Console

    from scalelab.cli.compare import print_table, table

    result = {"model": "resnet18", "workers": 1, "rate": None, "steps": [
        {"name": "batch+algorithm+loaders", "config": {"batch_size": 128, "ps": 1,
                                                       "partition": "tensor"},
         "predicted_samples_per_s": 199.8, "measured_samples_per_s": 197.3, "speedup": 6.56,
         "predicted_speedup": 6.58, "error": -0.0134}]}
    buf = io.StringIO()
    console = Console(file=buf, width=80)
    print_table(console, table(result))
    text = buf.getvalue()
    assert "-1.3%" in text and "error" in text and "…" not in text
    assert "1 worker," in text and console.width == 80


def test_workload_algorithm_key_is_documented_and_read(tmp_path):
    from scalelab.plan import load_input

    root = Path(__file__).resolve().parents[1]
    readme = root / "README.md"
    assert "`algorithm`" in readme.read_text()
    (tmp_path / "w.toml").write_text('model = "resnet18"\nbatch_size = 8\nstep_s = 0.1\n'
                                     'algorithm = "channels_last"\n')
    assert load_input(tmp_path / "w.toml").algorithm == "channels_last"


def test_cluster_with_network_and_network_gbps_is_a_usage_error(tmp_path, cache, capsys):
    (tmp_path / "c.toml").write_text('nodes = 2\nnetwork = "10GbE"\nnetwork_gbps = 25\n')
    assert main(["advise", *ARGS, "--cluster", str(tmp_path / "c.toml"),
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "network" in err and "network_gbps" in err


def test_one_of_a_kind_is_singular_in_cli_and_report_text():
    from scalelab.cli.calibrate import table as calibrate_table
    from scalelab.cli.validate import summary_lines
    from scalelab.report.cards import cluster_summary
    from scalelab.report.html import _summary

    assert summary_lines({"link": {}, "median_abs_error": 0.1, "max_abs_error": 0.1,
                          "cases": [{}]})[-1].endswith("(1 case)")
    assert calibrate_table({"fitted_cases": [1], "parameters": {}}).title.endswith("(1 case)")
    assert _summary([], [{"config": {"architecture": "ps", "workers": 1},
                          "samples_per_s": 5.0}]) == ["run: ps with 1 worker, 5.0 samples/s "
                                                      "measured"]
    text = cluster_summary({"inputs": {"cluster": {"nodes": 1, "gpus_per_node": 1,
                                                   "network": "10GbE"}}})
    assert text == "1 node x 1 GPU, 10GbE"


def test_help_examples_work_from_any_folder(tmp_path, monkeypatch, capsys):
    """No --help example names a path under the repository; plan's workload examples run
    from an empty folder (the files ship inside the package)."""
    import argparse
    import shlex

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert "examples/" not in (p.epilog or ""), name
    monkeypatch.chdir(tmp_path)
    epilog = sub.choices["plan"].epilog.replace("\\\n", " ")
    runnable = [line.split("scalelab ", 1)[1] for line in epilog.splitlines()
                if line.strip().startswith("scalelab plan --workload")]
    assert runnable
    for line in runnable:
        args = [a for a in shlex.split(line) if a != "--plot" and not a.endswith(".png")]
        assert main([*args, "--quiet"]) == 0, line


def test_a_multi_gpu_host_is_planned_with_its_own_device_and_links(monkeypatch):
    import torch

    from scalelab.advise import this_machine_cluster

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3")
    c = this_machine_cluster({"device": "cuda:0"})
    assert c.gpus_per_node == 8 and c.device == "H100-SXM"
    bw, how = c.intra_link()
    assert "NVLink" in how and bw == 450e9
    assert this_machine_cluster({"device": "cpu"}) is None
