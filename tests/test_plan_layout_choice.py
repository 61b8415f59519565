"""The recommendation's layout: plain DDP where it fits, a ZeRO layout where nothing else
fits or where sharding lets a larger batch raise the efficiency, with the numbers; the
launch command runs FSDP only when sharded."""

import json

import pytest

from scalelab.plan import PlanOptions
from scalelab.plan.cluster import Cluster
from scalelab.plan.inputs import PlanInput, workload_from_dict
from scalelab.plan.launch_line import launch_command
from scalelab.plan.recommend import plan
from scalelab.plan.story import headline
from scalelab.theory import zero

V100 = "V100-SXM2-16GB"


def _cluster(**kw):
    return Cluster(nodes=2, gpus_per_node=8, device=V100, network="100GbE", **kw)


def test_a_state_too_large_for_plain_dp_gets_a_zero_layout_with_its_numbers():
    # 1.5e9 fp32 parameters, SGD with momentum: 3 x 6e9 B = 16.76 GiB > 14.40 usable
    inp = workload_from_dict({"param_bytes": 6_000_000_000, "batch_size": 32,
                              "step_s": 0.5, "device": V100})
    p = plan(inp, _cluster())
    rec = p.recommendation
    assert rec.layout in ("zero1", "zero2", "zero3")
    assert rec.architecture == "allreduce"
    why = rec.layout_reason
    assert "16.76 GiB against 14.40 GiB usable of 16.00 GiB" in why
    assert "ddp 16.76 GiB (does not fit)" in why
    assert "exchange x1," in why and "exchange x1.5," in why  # ZeRO-2's and ZeRO-3's factor
    opts = {o["layout"]: o for o in rec.layouts}
    assert not opts["ddp"]["fits"] and opts[rec.layout]["fits"]
    # the paper's formulas on n ranks, ZeRO-2 = p Psi + (g + K) Psi / n, plus the full
    # gradient of the largest unit before its reduce-scatter (no units known: the model)
    n = rec.gpus
    assert opts["zero2"]["memory_bytes"] == pytest.approx(6e9 + 12e9 / n + 6e9 * (n - 1) / n)
    assert opts["zero1"]["memory_bytes"] == pytest.approx(12e9 + 6e9 / n)
    assert rec.efficiency == pytest.approx(opts[rec.layout]["efficiency"])
    assert f"--architecture fsdp --zero {rec.layout[-1]}" in rec.launch
    assert "--architecture allreduce" not in rec.launch
    assert not [w for w in p.warnings if "does not fit" in w.text]  # the layout fits
    d = p.to_dict()["recommendation"]
    assert d["layout"] == rec.layout and d["layout_reason"] == why
    assert f"recommend allreduce with ZeRO-{rec.layout[-1]} on {n} GPUs" in \
        headline(p.to_dict())
    assert any(r.startswith(f"layout {rec.layout}") for r in d["reasons"])


def test_a_model_that_fits_stays_plain_ddp_without_fsdp():
    inp = workload_from_dict({"param_bytes": 400_000_000, "batch_size": 32, "step_s": 0.5,
                              "device": V100})
    p = plan(inp, _cluster())
    rec = p.recommendation
    assert rec.layout == "ddp" and "ZeRO" not in headline(p.to_dict())
    assert rec.layout_reason.startswith("layout ddp (no sharding): it fits")
    assert "1.12 GiB against 14.40 GiB usable" in rec.layout_reason
    assert "fsdp" not in rec.launch and "--zero" not in rec.launch


def test_no_device_memory_known_leaves_the_plan_as_it_was():
    inp = workload_from_dict({"param_bytes": 6_000_000_000, "batch_size": 32, "step_s": 0.5})
    rec = plan(inp, Cluster(nodes=2, gpus_per_node=8, network="100GbE")).recommendation
    assert rec.layout == "ddp" and rec.layout_reason is None and "fsdp" not in rec.launch


def test_the_launch_command_names_fsdp_only_when_sharded():
    inp = workload_from_dict({"param_bytes": 4_000_000, "batch_size": 8, "step_s": 0.1})
    c = _cluster()
    plain = launch_command(inp, c, "allreduce", 16, 0, 8)
    assert "--architecture allreduce" in plain and "fsdp" not in plain
    for level in (1, 2, 3):
        cmd = launch_command(inp, c, "allreduce", 16, 0, 8, layout=f"zero{level}")
        assert f"--architecture fsdp --zero {level} --batch-size 8" in cmd


def _profile_input(**kw):
    """A profile-like input: 1e9 fp32 parameters (SGD with momentum: 12 GB of state),
    100 MB of activations per sample, step = 20 ms per sample on the V100 itself."""
    comp = {"param_count": 1_000_000_000, "param_bytes": 4e9, "grad_bytes": 4e9,
            "optimizer_bytes": 4e9, "activation_bytes_per_sample": 100e6,
            "input_bytes_per_sample": 0, "tensor_shapes": [[1000, 1_000_000]],
            "unit_params": [25_000_000] * 40}
    base = dict(batch_size=16, step_s=0.32, param_bytes=4_000_000_000, source="profile",
                device=V100, batches=((8, 0.16), (16, 0.32)), fit_step_s=(0.0, 0.02),
                max_batch_size=16, memory_components=comp)
    base.update(kw)
    return PlanInput(**base)


def test_sharding_chosen_where_a_larger_batch_raises_the_efficiency():
    # 16 single-GPU nodes on 10GbE, all-reduce named: every count below the target 0.8
    cluster = Cluster(nodes=16, gpus_per_node=1, device=V100, network="10GbE",
                      architecture="allreduce")
    p = plan(_profile_input(), cluster)
    rec = p.recommendation
    assert rec.layout != "ddp"
    assert rec.reasons[0].text == f"batch_size {rec.batch_size}: chosen with the layout"
    first = rec.reasons[1].text
    assert "frees memory for batch" in first and "plain data parallelism holds at most batch" \
        in first
    # DDP holds floor((14.40 GiB - 12e9) / 1e8) = 34; the sharded layout more
    assert "holds at most batch 34" in first
    assert rec.batch_size > 34
    assert f"--zero {rec.layout[-1]} --batch-size {rec.batch_size}" in rec.launch
    opts = {o["layout"]: o for o in rec.layouts}
    assert opts[rec.layout]["fits"] and not opts["ddp"]["fits"]
    assert rec.efficiency == pytest.approx(opts[rec.layout]["efficiency"])
    # the same model asked at batch 16 keeps the batch and plain DDP
    asked = plan(_profile_input(), cluster, PlanOptions(batch_size=16)).recommendation
    assert asked.layout == "ddp" and asked.batch_size == 16


def test_an_asked_batch_plain_ddp_does_not_hold_is_accumulated_to_exactly_it():
    cluster = Cluster(nodes=1, gpus_per_node=8, device=V100, network="100GbE")
    p = plan(_profile_input(), cluster, PlanOptions(batch_size=400))
    rec = p.recommendation
    k = rec.accumulation
    assert k > 1 and rec.batch_size * k == 400 and rec.global_batch == 400 * rec.gpus
    assert p.inputs["cluster"]["accumulation_steps"] == k
    warned = [w.text for w in p.warnings if "does not fit" in w.text]
    assert len(warned) == 1 and f"batch 400 per device does not fit the {V100} in one " \
        f"pass" in warned[0] and f"micro-batch {rec.batch_size} x {k}" in warned[0]
    assert f"--accumulation-steps {k}" in rec.launch
    if rec.layout != "ddp":  # sharded only where faster beyond the band
        assert "faster beyond" in rec.layout_reason


def test_exposed_exchange_of_each_layout_from_ddps():
    assert zero.exchange_factor("zero2", param_bytes_per_param=4, grad_bytes_per_param=4) == 1
    assert zero.exchange_factor("zero3", param_bytes_per_param=4, grad_bytes_per_param=4) == 1.5
    assert zero.layout_exposed_s("ddp", 0.1, 1.0, ranks=2) == 0.1
    # ZeRO-1 adds its broadcasts, p Psi / B: on 2 ranks the all-reduce's time again (C =
    # 2 (N-1)/N g Psi / B = g Psi / B), on 8 ranks 8/14 of it
    assert zero.layout_exposed_s("zero1", 0.1, 1.0, ranks=2) == pytest.approx(1.1)
    assert zero.layout_exposed_s("zero1", 0.1, 1.0, ranks=8) == pytest.approx(0.1 + 8 / 14)
    assert zero.layout_exposed_s("zero3", 0.1, 1.0, ranks=2) == pytest.approx(0.15)
    with pytest.raises(ValueError):
        zero.layout_exposed_s("zero4", 0.1, 1.0, ranks=2)
    # the same broadcast as the layouts' rows count it, from the bytes
    psi, n, bw = 1e6, 4, 1e8
    c = 2 * (n - 1) / n * 4 * psi / bw
    assert zero.zero1_broadcast_s(psi, n, bw, param_bytes_per_param=4) == pytest.approx(
        zero.layout_exposed_s("zero1", 0.0, c, ranks=n))
    assert zero.zero1_broadcast_s(psi, 1, bw) == 0.0


def test_vgg16_at_512_from_a_cpu_workload_launches_micro_batches_that_make_512():
    # the plan's compute model gives the step at any batch on the V100: 512 per device is
    # trained as the largest divisor plain DDP holds (186 at most: 128) x 4, one exchange
    inp = workload_from_dict({"model": "vgg16", "batch_size": 512, "step_s": 40.0,
                              "device": "cpu"})
    p = plan(inp, Cluster(nodes=1, gpus_per_node=8, device=V100), PlanOptions(batch_size=512))
    rec = p.recommendation
    assert (rec.batch_size, rec.accumulation, rec.layout) == (128, 4, "ddp")
    assert "--architecture allreduce --batch-size 128" in rec.launch
    assert "--accumulation-steps 4" in rec.launch
    assert rec.layout_reason.startswith("layout ddp, recompute none: global batch 4,096 = "
                                        "micro-batch 128 x 4 accumulation step(s) x 8")


def test_plan_layout_option_names_the_layout(tmp_path, capsys):
    from scalelab.cli import main

    wl = tmp_path / "w.toml"
    wl.write_text('param_bytes = 400_000_000\nbatch_size = 32\nstep_s = 0.5\n'
                  f'device = "{V100}"\n')
    out = tmp_path / "plan.json"
    assert main(["plan", "--workload", str(wl), "--device", V100, "--nodes", "2",
                 "--gpus-per-node", "8", "--network", "100GbE", "--layout", "zero3",
                 "--out", str(out)]) == 0
    rec = json.loads(out.read_text())["recommendation"]
    assert rec["layout"] == "zero3" and "--architecture fsdp --zero 3" in rec["launch"]
    assert rec["layout_reason"].startswith("layout zero3 at batch 32: on 16 V100-SXM2-16GB")
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:  # argparse's choices: one line, exit 2
        main(["plan", "--workload", str(wl), "--layout", "zero4"])
    assert bad.value.code == 2 and "zero4" in capsys.readouterr().err


def test_a_sharded_layout_on_a_cluster_naming_ps_does_not_claim_the_clusters_name():
    inp = workload_from_dict({"param_bytes": 6_000_000_000, "batch_size": 32,
                              "step_s": 0.5, "device": V100})
    p = plan(inp, _cluster(architecture="ps"))
    rec = p.recommendation
    assert rec.layout in ("zero1", "zero2", "zero3") and rec.architecture == "allreduce"
    assert not any("as the cluster names it" in r for r in p.to_dict()["recommendation"]
                   ["reasons"] if r.startswith("architecture allreduce"))


def test_a_named_layout_holds_where_the_devices_memory_is_unknown():
    # a CPU profile: no catalog device, so nothing to judge memory by; the named layout is
    # still the recommendation's (compare --layout trains it), unjudged
    inp = workload_from_dict({"param_bytes": 4_000_000, "batch_size": 8, "step_s": 10.0})
    cluster = Cluster(nodes=2, gpus_per_node=1, network="1GbE")
    rec = plan(inp, cluster, PlanOptions(layout="zero2")).recommendation
    assert rec.gpus == 2
    assert rec.layout == "zero2" and "not judged" in rec.layout_reason
    assert "--architecture fsdp --zero 2" in rec.launch
    assert plan(inp, cluster).recommendation.layout == "ddp"
