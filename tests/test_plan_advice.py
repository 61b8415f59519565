"""The recommendation reads as one coherent piece of advice (no contradiction, no e-notation,
alternatives, the limiting part named, never past the cluster's size)."""

from __future__ import annotations

import pytest

from scalelab.cli import main
from scalelab.errors import UsageError
from scalelab.plan import Cluster, PlanOptions, plan
from scalelab.plan.advice import floor2
from scalelab.plan.inputs import workload_from_dict
from scalelab.text import format_gbps, sig3

RESNET50 = {"param_bytes": 102_228_128, "batch_size": 64, "step_s": 0.292}


def test_efficiency_below_the_target_never_prints_as_the_target():
    assert floor2(0.797) == "0.79" and floor2(0.8) == "0.80" and floor2(1.0) == "1.00"


def test_rates_have_three_significant_digits_and_no_e_notation():
    assert format_gbps(2590.3) == "2,590 Gb/s"
    assert format_gbps(70712.0) == "70,700 Gb/s"
    assert format_gbps(38.44) == "38.4 Gb/s"
    assert sig3(0.01234) == "0.0123"


def test_no_servers_in_advice_that_uses_none():
    p = plan(workload_from_dict(RESNET50), Cluster(nodes=8, network="10GbE", ps="auto"))
    rec = p.recommendation
    assert rec.architecture != "ps"  # all-reduce keeps the target, ps does not
    assert rec.num_ps == 0 and rec.num_ps_min == 0
    texts = [str(r) for r in rec.reasons]
    assert not any(t.startswith("num_ps") for t in texts)
    # the ps sizing is still there, as a what-if for the whole cluster
    assert p.ps_sizing is not None and p.ps_sizing.gpus == 8
    assert any(t.startswith("if parameter servers on all 8 devices") for t in texts)
    assert not any("e+" in t for t in texts)


def test_limiting_part_is_named_not_the_largest_part():
    p = plan(workload_from_dict(RESNET50), Cluster(nodes=8, network="10GbE", ps=8,
                                                   architecture="ps"))
    row = next(r for r in p.sweep if r.architecture == "ps" and r.gpus == 8)
    assert row.efficiency < 0.7 and row.compute_s > row.comm_s
    assert row.bottleneck.startswith("network")


def test_alternatives_show_the_whole_cluster_beside_the_target():
    inp = workload_from_dict({"param_bytes": 100_000_000, "batch_size": 32, "step_s": 0.1})
    p = plan(inp, Cluster(nodes=4, gpus_per_node=8, network="25GbE", intra_node="nvlink3",
                          architecture="allreduce"),
             PlanOptions(architectures=("allreduce",), target_efficiency=0.9))
    rec = p.recommendation
    labels = {a.label: a for a in rec.alternatives}
    assert "all 32" in labels and "one node" in labels
    assert labels["all 32"].gpus == 32 and labels["one node"].gpus == 8
    assert rec.gpus < 32 and labels["all 32"].efficiency < 0.9
    assert labels["all 32"].samples_per_s > rec.samples_per_s
    assert rec.to_dict()["alternatives"][0]["gpus"] in (32, 8, rec.gpus)


def test_single_device_answer_says_why_and_what_more_would_give():
    inp = workload_from_dict({"param_bytes": 180_000_000, "batch_size": 32, "step_s": 0.3})
    p = plan(inp, Cluster(nodes=2, network_gbps=1, ps=4))
    rec = p.recommendation
    assert rec.gpus == 1
    assert any("already 2 GPUs fall to efficiency" in str(r) for r in rec.reasons)
    assert any(a.label == "all 2" for a in rec.alternatives)


def test_never_a_plan_past_the_cluster(capsys, tmp_path):
    with pytest.raises(UsageError, match="more than the cluster's 32 devices"):
        plan(workload_from_dict(RESNET50), Cluster(nodes=4, gpus_per_node=8, network="10GbE"),
             PlanOptions(max_gpus=1000))
    wl = tmp_path / "w.toml"
    wl.write_text("param_bytes = 102228128\nbatch_size = 64\nstep_s = 0.292\n")
    rc = main(["plan", "--workload", str(wl), "--nodes", "4", "--gpus-per-node", "8",
               "--network", "10GbE", "--max-gpus", "1000", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "32 devices" in err


def test_a_step_too_small_for_the_cluster_is_said_in_one_line(tmp_path, capsys):
    inp = workload_from_dict({"param_bytes": 1_600_000, "batch_size": 32, "step_s": 1.4e-6})
    p = plan(inp, Cluster(nodes=4, gpus_per_node=8, network="100GbE", intra_node="nvlink3"))
    assert p.recommendation.too_small and "too small" in p.recommendation.too_small
    wl = tmp_path / "w.toml"
    wl.write_text("param_bytes = 1600000\nbatch_size = 32\nstep_s = 1.4e-6\n")
    main(["plan", "--workload", str(wl), "--nodes", "4", "--gpus-per-node", "8",
          "--network", "100GbE", "--quiet", "--out", str(tmp_path / "p.json")])
    out = capsys.readouterr().out
    assert "too small for the cluster to matter" in out and "samples/s" not in out


def test_launch_command_runs_the_recommendation():
    p = plan(workload_from_dict({**RESNET50, "model": "resnet50"}),
             Cluster(nodes=2, gpus_per_node=8, network="100GbE", intra_node="nvlink3",
                     architecture="allreduce"))
    rec = p.recommendation
    assert rec.launch.startswith("torchrun --nnodes 2 --nproc-per-node 8")
    assert f"--workers {rec.gpus}" in rec.launch and "-m scalelab run resnet50" in rec.launch


def test_calibration_decides_the_model_and_bands_every_prediction(tmp_path):
    from scalelab.results import write_json

    cal = write_json(tmp_path / "cal.json", "calibration", {
        "params": {"bandwidth_efficiency": 0.5}, "model": "calibrated",
        "decision": {"model": "calibrated", "reason": "held-out error 3% < 9%"},
        "band": {"low": 0.9, "high": 1.2, "cases": 8, "source": "held out"}})
    wl = tmp_path / "w.toml"
    wl.write_text("param_bytes = 102228128\nbatch_size = 64\nstep_s = 0.292\n")
    out = tmp_path / "p.json"
    assert main(["plan", "--workload", str(wl), "--nodes", "4", "--network", "10GbE",
                 "--calibration", str(cal), "--out", str(out)]) == 0
    import json

    d = json.loads(out.read_text())
    assert d["band"]["low"] == 0.9 and d["band"]["high"] == 1.2
    for r in d["sweep"]:
        assert r["step_s_low"] == pytest.approx(0.9 * r["step_s"])
        assert r["samples_per_s_low"] == pytest.approx(r["samples_per_s"] / 1.2)
    assert any("calibrated model" in t for t in d["recommendation"]["reasons"])
    assert d["model_params"]["bandwidth_efficiency"] == 0.5


def test_an_estimate_for_another_device_carries_its_band():
    from scalelab.plan.compute import TargetCompute
    from scalelab.plan.recommend import _band

    band = _band(PlanOptions(), TargetCompute(0.1, True, (), (), band=0.12))
    assert band.low == pytest.approx(0.88) and band.high == pytest.approx(1.12)
    assert _band(PlanOptions(), TargetCompute(0.1, False, (), ())) is None


def test_advice_says_which_batch_would_scale_to_the_whole_cluster():
    inp = workload_from_dict({"param_bytes": 100_000_000, "batch_size": 32, "step_s": 0.05})
    c = Cluster(nodes=8, network="10GbE", overlap=0.0)  # not named: the target sets the count
    p = plan(inp, c, PlanOptions(architectures=("allreduce",)))
    rec = p.recommendation
    assert rec.gpus < 8
    text = next(str(r) for r in rec.reasons if "raise the per-device batch" in str(r))
    need = int(text.split("to about ")[1].split(" ")[0].replace(",", ""))
    # at that batch the same cluster keeps the target on all 8
    scaled = workload_from_dict({"param_bytes": 100_000_000, "batch_size": need,
                                 "step_s": 0.05 * need / 32})
    top = [r for r in plan(scaled, c, PlanOptions(architectures=("allreduce",))).sweep][-1]
    assert top.gpus == 8 and top.efficiency >= 0.8 - 1e-9


def test_one_gpu_launch_needs_no_torchrun():
    inp = workload_from_dict({"param_bytes": 180_000_000, "batch_size": 32, "step_s": 0.3})
    rec = plan(inp, Cluster(nodes=2, network_gbps=1, ps=4)).recommendation
    assert rec.gpus == 1 and rec.launch.startswith("scalelab run MODEL --workers 1")


def test_a_cpu_profiles_precision_is_not_the_gpu_plans(tmp_path):
    from scalelab import hardware
    from scalelab.plan import load_profile
    from scalelab.plan.compute import target_precision
    from tests.toy_plan import write_profile

    a100 = hardware.device("A100-SXM-80GB")
    c = Cluster(device="A100-SXM-80GB", network="100GbE")
    path = write_profile(tmp_path / "p.json", step_s=0.2, batch=32,
                         algorithm="channels_last+bf16_autocast")
    inp = load_profile(path)
    assert inp.algorithm == "channels_last+bf16_autocast"
    assert target_precision(inp, c, PlanOptions(), a100)[0] == "fp32"
    bf16 = Cluster(device="A100-SXM-80GB", network="100GbE", precision="bf16")
    assert target_precision(inp, bf16, PlanOptions(), a100)[0] == "bf16"
    assert target_precision(inp, c, PlanOptions(precision="fp16"), a100)[0] == "fp16"
    # two CPU profiles that differ only in the CPU's winner plan the same GPU cluster
    other = load_profile(write_profile(tmp_path / "q.json", step_s=0.2, batch=32,
                                       algorithm="channels_last"))
    cl = Cluster(nodes=4, gpus_per_node=8, device="A100-SXM-80GB", network="100GbE",
                 intra_node="nvlink3")
    assert plan(inp, cl).recommendation.gpus == plan(other, cl).recommendation.gpus
    rec = plan(inp, cl).recommendation
    assert rec.algorithm.startswith("fp32") and "bf16" not in rec.algorithm
    assert any("not carried over" in str(r) for r in rec.reasons)
