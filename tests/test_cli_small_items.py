"""What a new user trips on: each item checked the way they met it (the command line, a
plan's reasons), before any work starts and with nothing on stderr but the error line."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalelab import hardware
from scalelab.cli import main
from scalelab.plan import Cluster, PlanOptions, plan, workload_from_dict
from scalelab.results import read_json

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _never_profile(*a, **k):
    raise AssertionError("profiled before the options were checked")


def test_h200_and_h100_pcie_nodes_reach_their_host_over_pcie5():
    pcie5 = hardware.link("pcie5")
    for device in ("H200", "H100-PCIE", "H100-SXM"):
        bps, how = Cluster(device=device, network="400GbE").host_link_Bps()
        assert bps == pcie5.bandwidth_Bps, device
        assert "unknown" not in how and "PCIe 5" in how
    inp = workload_from_dict({"param_bytes": 100_000_000, "batch_size": 64, "step_s": 0.05,
                              "device": "H200"})
    c = Cluster(nodes=2, gpus_per_node=8, device="H200", network="400GbE", architecture="ps",
                ps_placement="colocated")
    why = next(r for r in plan(inp, c).recommendation.to_dict()["reasons"]
               if r.startswith("num_ps"))
    assert "PCIe 5.0" in why and "unknown" not in why


@pytest.mark.parametrize("value", ["1.5", "0"])
def test_advise_refuses_a_bad_target_efficiency_before_profiling(value, tmp_path, capsys,
                                                                 monkeypatch):
    import scalelab.advise

    monkeypatch.setattr(scalelab.advise, "run_profile", _never_profile)
    code = main(["advise", "resnet18", "--target-efficiency", value, "--out",
                 str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 2
    assert err == f"scalelab: error: target efficiency must be in (0, 1], got {float(value)}\n"


def test_advise_writes_only_the_error_line_to_stderr(tmp_path, capsys, monkeypatch):
    import scalelab.advise

    monkeypatch.setattr(scalelab.advise, "run_profile", _never_profile)
    code = main(["advise", "resnet18", "--cluster", "no-such-cluster", "--out",
                 str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("scalelab: error: --cluster no-such-cluster") and err.count("\n") == 1


def test_a_single_node_needs_no_network(tmp_path, capsys):
    w = tmp_path / "w.toml"
    w.write_text("param_bytes = 100_000_000\nbatch_size = 32\nstep_s = 0.2\n")
    out = tmp_path / "plan.json"
    code = main(["plan", "--workload", str(w), "--gpus-per-node", "8", "--device",
                 "A100-SXM-80GB", "--out", str(out), "--quiet"])
    text, err = capsys.readouterr()
    assert code == 0, err
    data = read_json(out, "plan")
    assert data["recommendation"]["gpus"] == 8 and "no network needed" in text
    # its servers, if any, run on its CPU: no byte crosses a NIC
    assert data["inputs"]["cluster"]["ps_placement"] == "colocated"
    assert data["inputs"]["network_Bps"] is None
    # two nodes, or servers on other machines, do need one
    for extra in (["--nodes", "2"], ["--ps-placement", "dedicated"]):
        code = main(["plan", "--workload", str(w), *extra, "--out", str(out)])
        _, err = capsys.readouterr()
        assert code == 2 and err.startswith("scalelab: error: name the network")


def test_a_workload_files_algorithm_is_not_said_to_come_from_a_profile():
    inp = workload_from_dict({"param_bytes": 100_000_000, "batch_size": 32, "step_s": 0.2,
                              "algorithm": "channels_last"})
    reasons = plan(inp, Cluster(nodes=2, network="10GbE")).recommendation.to_dict()["reasons"]
    why = next(r for r in reasons if r.startswith("algorithm channels_last"))
    assert "profile" not in why and "workload file" in why


def test_per_node_bandwidth_says_how_many_nics():
    inp = workload_from_dict({"param_bytes": 100_000_000, "batch_size": 32, "step_s": 0.05,
                              "device": "A100-SXM-80GB"})
    c = Cluster(nodes=4, gpus_per_node=8, device="A100-SXM-80GB", network="100GbE",
                architecture="allreduce", platform="dgx")
    why = next(r for r in plan(inp, c, PlanOptions(target_efficiency=0.99))
               .recommendation.to_dict()["reasons"] if r.startswith("network_gbps_needed"))
    # a DGX A100 has one NIC per GPU: the per-node need is set against 8 of them
    assert "8 NICs x 94.9 Gb/s = 759 Gb/s per node" in why


def test_hardware_list_piped_keeps_every_number(capsys):
    assert main(["hardware", "list"]) == 0
    out, _ = capsys.readouterr()
    assert "…" not in out and "..." not in out
    v100 = next(line for line in out.splitlines() if "V100-SXM2-16GB" in line)
    assert "15.7" in v100 and "125" in v100 and "900" in v100


@pytest.mark.parametrize("extra, says", [
    ("step_s = inf", "'step_s' must be a finite number, got inf"),
    ("batch_size = nan", "'batch_size' must be a finite number, got nan"),
    ("host_s_per_op = inf", "'host_s_per_op' must be a finite number, got inf"),
    ("host_s_per_op = 0", "'host_s_per_op' must be > 0 seconds, got 0"),
    ("num_classes = 10.5", "'num_classes' must be an integer >= 1, got 10.5"),
    ("num_classes = \"ten\"", "'num_classes' must be a number, got 'ten'"),
    ("algorithm = 5", "'algorithm' must be a name in quotes, got 5"),
    ("algorithm = \"bf16\"", "'algorithm': unknown computation option(s) bf16 (known: default,"),
    ("algorithm = \"bf16_autocast+fp16_autocast\"",
     "'algorithm': 'bf16_autocast+fp16_autocast': choose one of bf16_autocast and fp16"),
    ("device = 7", "'device' must be a name in quotes, got 7"),
    ("load_s_per_sample = -0.01", "'load_s_per_sample' must be >= 0 seconds, got -0.01"),
    ("flops_per_sample = 0", "'flops_per_sample' must be > 0 FLOPs, got 0"),
])
def test_a_workload_files_bad_value_is_one_line_naming_its_key(extra, says, tmp_path, capsys):
    """All but ``host_s_per_op = 0`` (refused already) were a traceback (inf, nan, a number
    or a string of the wrong kind, a negative load time) or taken without a word (an
    unknown or contradictory configuration, 10.5 classes, no FLOPs, a device named 7)."""
    w = tmp_path / "w.toml"
    lines = {"param_bytes": "100_000_000", "batch_size": "32", "step_s": "0.2"}
    key, value = (part.strip() for part in extra.split("=", 1))
    w.write_text("".join(f"{k} = {v}\n" for k, v in {**lines, key: value}.items()))
    code = main(["plan", "--workload", str(w), "--gpus-per-node", "2", "--device", "H100-SXM",
                 "--out", str(tmp_path / "plan.json")])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"scalelab: error: {w}: {says}"), err
    assert not (tmp_path / "plan.json").exists()
    # the same file without the bad line plans
    w.write_text("param_bytes = 100_000_000\nbatch_size = 32\nstep_s = 0.2\n")
    assert main(["plan", "--workload", str(w), "--gpus-per-node", "2", "--device", "H100-SXM",
                 "--out", str(tmp_path / "plan.json"), "--quiet"]) == 0


@pytest.mark.parametrize("extra, says", [
    ("price_per_gpu_hour = \"2.5\"", "price_per_gpu_hour must be > 0, got '2.5'"),
    ("price_per_gpu_hour = inf", "price_per_gpu_hour must be > 0 and finite, got inf"),
    ("overlap = \"half\"", "overlap must be in [0, 1], got 'half'"),
    ("latency_s = \"1e-5\"", "latency_s must be >= 0, got '1e-5'"),
    ("ddp_bucket_mb = inf", "ddp_bucket_mb must be > 0 and finite, got inf"),
    ("network_gbps = nan", "network_gbps must be > 0 Gb/s and finite, got nan"),
    ("measured_network_Bps = \"fast\"", "measured network bandwidth must be > 0 B/s, got"),
    ("full_duplex = 1", "full_duplex must be true or false, got 1"),
    ("local_aggregation = \"yes\"", "local_aggregation must be true or false, got 'yes'"),
])
def test_a_cluster_files_bad_value_is_one_line(extra, says, tmp_path, capsys):
    """Each was a traceback (a string where a number goes, an infinite bucket), taken without
    a word (an infinite price, 1 or "yes" for true) or, for nan, refused without saying that
    the value must be finite."""
    w = tmp_path / "w.toml"
    w.write_text("param_bytes = 100_000_000\nbatch_size = 32\nstep_s = 0.2\n")
    c = tmp_path / "c.toml"
    lines = {"nodes": "2", "gpus_per_node": "8", "device": "\"A100-SXM-80GB\"",
             "network_gbps": "100"}
    key, value = (part.strip() for part in extra.split("=", 1))
    c.write_text("".join(f"{k} = {v}\n" for k, v in {**lines, key: value}.items()))
    code = main(["plan", "--workload", str(w), "--cluster", str(c), "--out",
                 str(tmp_path / "plan.json")])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"scalelab: error: {says}"), err
    c.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
    assert main(["plan", "--workload", str(w), "--cluster", str(c), "--out",
                 str(tmp_path / "plan.json"), "--quiet"]) == 0


FOLDER_OUTPUTS = [
    ["plan", "--workload", "W", "--out", "D"],
    ["plan", "--workload", "W", "--plot", "D", "--out", "F"],
    ["validate", "tests.toy_models:mlp", "--input-shape", "6", "--grid", "workers=2", "--out",
     "D"],
    ["run", "tests.toy_models:mlp", "--input-shape", "6", "--workers", "1", "--out", "D"],
    ["profile", "tests.toy_models:mlp", "--input-shape", "6", "--out", "D"],
    ["report", "W", "--out", "D"],
]


@pytest.mark.parametrize("argv", FOLDER_OUTPUTS, ids=[" ".join(a[:1] + a[-2:])
                                                       for a in FOLDER_OUTPUTS])
def test_a_file_output_named_as_a_folder_is_refused_before_the_command_runs(
        tmp_path, capsys, monkeypatch, argv):
    """Before, a plan, validation or run did its work and then raised IsADirectoryError
    (exit 1, a traceback) when it wrote its file: the results were lost."""
    import scalelab.cli as cli

    folder = tmp_path / "out"
    folder.mkdir()
    ran = []
    real_build = cli.build_parser

    def parser():
        p = real_build()
        for action in p._subparsers._group_actions[0].choices.values():
            action.set_defaults(func=lambda args: ran.append(args) or 0)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    names = {"W": str(tmp_path / "w.toml"), "D": str(folder), "F": str(tmp_path / "p.json")}
    argv = [names.get(a, a) for a in argv]
    assert cli.main(argv) == 2 and not ran
    flag = argv[argv.index(str(folder)) - 1]
    assert capsys.readouterr().err == \
        f"scalelab: error: {flag} {folder} is a folder; give a file's name\n"
    # advise's --out is the folder it writes into
    assert cli.main(["advise", "tests.toy_models:mlp", "--out", str(folder)]) == 0 and ran


def test_writing_a_result_over_a_folder_is_one_line(tmp_path):
    from scalelab.errors import UsageError
    from scalelab.results import write_json

    (tmp_path / "plan.json").mkdir()
    with pytest.raises(UsageError, match="plan.json: it is a folder; give a file's name"):
        write_json(tmp_path / "plan.json", "plan", {"sweep": []})
