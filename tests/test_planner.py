"""The planner: one step's prediction, inputs, cross-device scaling, recommendations."""

from __future__ import annotations

import dataclasses
import math

import pytest

from scalelab import plan as planner
from scalelab.errors import UsageError
from scalelab.plan import (
    Cluster,
    ModelParams,
    PlanOptions,
    StepSetup,
    StepWorkload,
    load_cluster,
    load_profile,
    plan,
    predict_step,
    workload_from_dict,
)
from scalelab.results import write_json
from tests.toy_plan import write_profile

MB = 1_000_000


def step(workload, architecture="ps", params=ModelParams(), **setup):  # noqa: B008
    """predict_step with the setup's fields as keywords."""
    return predict_step(workload, StepSetup(architecture, **setup), params)



# --- predict_step ------------------------------------------------------------------------


def test_single_device_exchanges_nothing():
    p = step(StepWorkload(100 * MB, 0.2), "ps", workers=1, num_ps=1,
                     worker_bandwidth_Bps=1e9)
    assert p.comm_s == 0 and p.step_s == pytest.approx(0.2) and p.bottleneck == "compute"


def test_seed_example_180MB_over_1Gbps_is_2_9s_per_push_pull():
    # Two workers, enough servers that the worker's own link is what binds.
    p = step(StepWorkload(180 * MB, 0.3), "ps", workers=2, num_ps=4,
                     worker_bandwidth_Bps=125e6)
    assert p.push_s == pytest.approx(1.44, rel=1e-9)
    assert p.pull_s == pytest.approx(1.44, rel=1e-9)
    assert p.comm_s == pytest.approx(2.88, rel=0.01)  # "about 2.9 s"
    assert p.bottleneck == "network-worker"
    assert p.form.startswith("push-then-pull")


def test_ps_server_bound_matches_paper_form():
    s, n, k, b = 244 * MB, 8, 4, 7e9
    p = step(StepWorkload(s, 1.0), "ps", workers=n, num_ps=k,
                     worker_bandwidth_Bps=100e9, ps_bandwidth_Bps=b)
    assert p.comm_s == pytest.approx(2 * s * n / (k * b), rel=1e-6)
    # 0.56 s of exchange on 1 s of compute: the servers' links limit scaling
    assert p.bottleneck == "network-server"
    light = step(StepWorkload(s / 100, 1.0), "ps", workers=n, num_ps=k,
                 worker_bandwidth_Bps=100e9, ps_bandwidth_Bps=b)
    assert light.bottleneck == "compute"  # 0.6% overhead: scales almost linearly
    p2 = step(StepWorkload(s, 0.1), "ps", workers=n, num_ps=k,
                      worker_bandwidth_Bps=100e9, ps_bandwidth_Bps=b)
    assert p2.bottleneck == "network-server"


def test_full_duplex_halves_push_then_pull():
    w = StepWorkload(100 * MB, 0.01)
    half = step(w, "ps", workers=4, num_ps=2, worker_bandwidth_Bps=1e9)
    full = step(w, "ps", workers=4, num_ps=2, worker_bandwidth_Bps=1e9,
                        full_duplex=True)
    assert full.comm_s == pytest.approx(half.comm_s / 2)
    assert full.form.startswith("pipelined")


def test_tensor_partition_reports_shard_imbalance():
    tensors = (70 * MB, 20 * MB, 10 * MB)
    w = StepWorkload(100 * MB, 0.01, tensor_bytes=tensors)
    even = step(w, "ps", workers=4, num_ps=4, worker_bandwidth_Bps=10e9,
                        ps_bandwidth_Bps=1e9)
    whole = step(w, "ps", workers=4, num_ps=4, partition="tensor",
                         worker_bandwidth_Bps=10e9, ps_bandwidth_Bps=1e9)
    assert whole.comm_s == pytest.approx(even.comm_s * 0.7 / 0.25, rel=1e-6)
    assert whole.bottleneck == "shard-imbalance"
    assert whole.effective_servers == pytest.approx(1 / 0.7)


def test_colocated_even_shards_move_ring_bytes():
    s, n, b = 100 * MB, 4, 1e9
    w = StepWorkload(s, 0.01)
    colo = step(w, "ps", workers=n, num_ps=n, colocated=True, worker_bandwidth_Bps=b)
    ring = step(w, "allreduce", workers=n, worker_bandwidth_Bps=b)
    assert colo.comm_s == pytest.approx(ring.comm_s, rel=1e-6)
    assert ring.comm_s == pytest.approx(2 * (n - 1) / n * s / b)


def test_model_params_act_as_documented():
    w = StepWorkload(100 * MB, 0.05)
    base = step(w, "ps", workers=2, num_ps=2, worker_bandwidth_Bps=1e9)
    slow = step(w, "ps", workers=2, num_ps=2, worker_bandwidth_Bps=1e9,
                        params=ModelParams(bandwidth_efficiency=0.5))
    assert slow.comm_s == pytest.approx(2 * base.comm_s)
    lat = step(w, "ps", workers=2, num_ps=2, worker_bandwidth_Bps=1e9,
                       params=ModelParams(latency_s=0.01))
    assert lat.comm_s == pytest.approx(base.comm_s + 0.02)  # once per phase
    cs = step(w, "ps", workers=2, num_ps=2, worker_bandwidth_Bps=1e9,
                      params=ModelParams(compute_scale=1.5))
    assert cs.compute_s == pytest.approx(0.075)
    ap = step(w, "ps", workers=2, num_ps=2, worker_bandwidth_Bps=1e9,
                      params=ModelParams(apply_s_per_byte=1e-10))
    # busiest server receives N_w * S_p / N_ps = 100 MB
    assert ap.apply_s == pytest.approx(1e-10 * 100 * MB)
    assert ap.comm_s == pytest.approx(base.comm_s + ap.apply_s)
    ov = step(w, "ps", workers=2, num_ps=2, worker_bandwidth_Bps=1e9,
                      params=ModelParams(overlap=1.0))
    assert ov.step_s == pytest.approx(max(0.05, base.comm_s))


def test_hierarchical_splits_intra_and_inter():
    s = 100 * MB
    p = step(StepWorkload(s, 0.01), "hierarchical", workers=16, gpus_per_node=8,
                     worker_bandwidth_Bps=10e9, intra_bandwidth_Bps=100e9)
    assert p.intra_s == pytest.approx(2 * 7 / 8 * s / 100e9)
    assert p.comm_s == pytest.approx(p.intra_s + 2 * 1 / 2 * s / 10e9)
    assert p.bottleneck == "network-worker"


@pytest.mark.parametrize("kw", [
    {"worker_bandwidth_Bps": 0.0}, {"worker_bandwidth_Bps": -1.0},
    {"worker_bandwidth_Bps": 1e9, "architecture": "tree"},
    {"worker_bandwidth_Bps": 1e9, "workers": 0},
    {"worker_bandwidth_Bps": 1e9, "num_ps": 0},
])
def test_predict_step_rejects_bad_input(kw):
    args = {"architecture": "ps", "workers": 2, "num_ps": 1, **kw}
    with pytest.raises(UsageError):
        step(StepWorkload(MB, 0.1), **args)


def test_model_params_validated():
    with pytest.raises(UsageError, match="bandwidth_efficiency"):
        ModelParams(bandwidth_efficiency=0)
    with pytest.raises(UsageError, match="overlap"):
        ModelParams(overlap=1.5)


# --- inputs and the cluster -------------------------------------------------------------


def test_cluster_validation_names_the_numbers():
    with pytest.raises(UsageError, match="nodes must be an integer >= 1, got 0"):
        Cluster(nodes=0, network="10GbE")
    with pytest.raises(UsageError, match="gpus_per_node"):
        Cluster(gpus_per_node=-2, network="10GbE")
    with pytest.raises(UsageError, match="network_gbps must be > 0"):
        Cluster(network_gbps=0)
    with pytest.raises(UsageError, match="known: .*10GbE"):
        Cluster(network="3GbE")
    with pytest.raises(UsageError, match="known: .*A100-SXM-80GB"):
        Cluster(device="Z900", network="10GbE")
    with pytest.raises(UsageError, match="name the network"):
        Cluster(nodes=2)


def test_cluster_precedence_cli_over_file_over_defaults(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('nodes = 4\ngpus_per_node = 2\nnetwork = "10GbE"\noverlap = 0.5\n')
    c = load_cluster(f, {"nodes": 8, "network_gbps": 25.0, "overlap": None})
    assert c.nodes == 8 and c.gpus_per_node == 2 and c.overlap == 0.5
    assert c.network is None and c.network_Bps() == pytest.approx(25e9 / 8)
    assert c.architecture is None  # default: not named, the fastest is recommended
    assert load_cluster(f).network_Bps() == pytest.approx(9.493e9 / 8)


def test_cluster_file_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("nodes = [\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_cluster(bad)
    unk = tmp_path / "unk.toml"
    unk.write_text('nodez = 3\nnetwork = "10GbE"\n')
    with pytest.raises(UsageError, match="unknown key"):
        load_cluster(unk)


def test_profile_is_read_by_contract(tmp_path):
    path = write_profile(tmp_path / "profile.json", step_s=0.2, batch=32, load_s_per_batch=0.5)
    inp = load_profile(path)
    assert inp.batch_size == 32 and inp.step_s == pytest.approx(0.2)
    assert inp.param_bytes == 100 * MB and inp.device == "cpu"
    assert len(inp.tensor_bytes) == 3 and inp.load_s_per_batch == 0.5
    assert inp.step_s_at(16) == pytest.approx(0.11)
    assert inp.step_s_at(48) == pytest.approx(0.29)  # on the fitted line
    with pytest.raises(UsageError, match="does not fit"):
        inp.step_s_at(1000)


def test_profile_of_another_schema_or_corrupt(tmp_path):
    other = write_json(tmp_path / "plan.json", "plan", {"sweep": []})
    with pytest.raises(UsageError, match="expected a scalelab profile"):
        load_profile(other)
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "scalelab.profile/1", "workload": ')
    with pytest.raises(UsageError, match="not valid JSON"):
        load_profile(broken)
    incomplete = write_json(tmp_path / "inc.json", "profile", {"workload": {}})
    with pytest.raises(UsageError, match="not a complete profile"):
        load_profile(incomplete)


def _set(path: str, value):
    def edit(d: dict) -> None:
        *parents, key = path.split(".")
        for p in parents:
            d = d[p]
        d[key] = value
    return edit


# A profile edited by hand or cut short: each of these was a traceback or taken without a
# word before (noted), and is now a UsageError naming the field
BAD_PROFILE_FIELDS = [
    ("workload.tensor_bytes", "x", "'tensor_bytes' must be a list of byte counts"),  # traceback
    ("io.load_s_per_batch", math.nan, "'load_s_per_batch' must be a finite number"),  # traceback
    ("io.load_s_per_batch", -0.5, "'load_s_per_batch' must be >= 0 seconds"),  # taken
    ("algorithms.chosen", 7, "'algorithms.chosen' must be a name in quotes"),  # traceback
    ("memory_components", 5, "'memory_components' is malformed"),  # traceback
    ("memory_components", {"param_count": 10}, "'memory_components' is malformed"),  # traceback
    ("recommended_batch_size", 2.5, "'recommended_batch_size' must be an integer >= 1"),  # taken
    ("workload.input_shape", [0], "malformed input shape"),  # taken
    ("workload.model", 5, "'model' must be a name in quotes"),  # taken
    ("workload.num_classes", "ten", "'num_classes' must be a number"),  # traceback
    ("host", "x", "'host' must be an object"),  # taken (as no measurement)
    ("host", {"s_per_op": -1}, "'host.s_per_op' must be > 0 seconds"),  # taken (as none)
    ("fit.step_s", {"intercept": 0, "per_sample": "x"}, "fit.step_s: 'per_sample' must be a "
     "number"),  # traceback
    ("max_batch_size", -3, "'max_batch_size' must be an integer >= 1"),  # taken
]


@pytest.mark.parametrize("field,value,message", BAD_PROFILE_FIELDS,
                         ids=[f"{f}={v!r}" for f, v, _ in BAD_PROFILE_FIELDS])
def test_a_bad_profile_field_is_named(tmp_path, field, value, message):
    from scalelab.plan.inputs import profile_from_dict
    from tests.toy_plan import profile_dict

    good = profile_dict()
    profile_from_dict(good, "p.json")  # the unedited profile is read
    bad = profile_dict()
    _set(field, value)(bad)
    with pytest.raises(UsageError) as e:
        profile_from_dict(bad, "p.json")
    assert str(e.value).startswith("p.json: ") and message in str(e.value), str(e.value)


def test_workload_file_needs_step_s_and_bytes():
    with pytest.raises(UsageError, match="missing 'step_s'"):
        workload_from_dict({"param_bytes": 10, "batch_size": 4})
    with pytest.raises(UsageError, match="model = NAME or param_bytes"):
        workload_from_dict({"batch_size": 4, "step_s": 0.1})
    with pytest.raises(UsageError, match="step_s must be > 0"):
        workload_from_dict({"param_bytes": 10, "batch_size": 4, "step_s": -1})


# --- the plan ----------------------------------------------------------------------------


def _alexnet(step_s=0.171, batch=128):
    return workload_from_dict({"model": "alexnet", "batch_size": batch, "step_s": step_s})


@pytest.mark.parametrize("gbps,expected", [(1, 183), (10, 19), (56, 4)])
def test_plan_ps_lemma_known_answers(gbps, expected):
    # Paper convention: nominal line rate, 1 Gb/s = 125e6 B/s, so network_gbps (not the
    # catalog's payload rate).
    p = plan(_alexnet(), Cluster(nodes=8, network_gbps=gbps, architecture="ps"))
    rec = p.recommendation
    assert p.ps_sizing.num_ps_min == expected and p.ps_sizing.gpus == 8
    assert p.to_dict()["ps_sizing"]["num_ps_min"] == expected
    assert rec.num_ps_min == (expected if rec.architecture == "ps" and rec.gpus == 8 else 0)
    fails = any("worker link fails" in r for r in map(str, rec.reasons))
    assert fails == (gbps in (1, 10))


def test_plan_whole_tensor_alexnet_names_the_imbalance():
    p = plan(_alexnet(), Cluster(nodes=8, network_gbps=56, ps_partition="tensor"))
    text = " ".join(map(str, p.recommendation.reasons))
    assert "61.8% on the largest shard" in text
    ps_rows = [r for r in p.sweep if r.architecture == "ps" and r.gpus >= 4]
    assert all(r.bottleneck == "shard-imbalance" for r in ps_rows)


def test_plan_seed_example_network_bottleneck_and_fix():
    inp = workload_from_dict({"param_bytes": 180 * MB, "batch_size": 32, "step_s": 0.3})
    p = plan(inp, Cluster(nodes=2, network_gbps=1, ps=4))
    row = next(r for r in p.sweep if r.architecture == "ps" and r.gpus == 2)
    assert row.comm_s == pytest.approx(2.88, rel=0.01)
    assert row.bottleneck.startswith("network")
    rec = p.recommendation
    # 2 S_p within T_C (1/0.8 - 1) = 75 ms: 360 MB / 0.075 s = 4.8e9 B/s = 38.4 Gb/s
    assert rec.network_gbps_needed == pytest.approx(38.4, rel=1e-6)
    assert any("network_gbps_needed 38.4 Gb/s" in r for r in map(str, rec.reasons))
    assert any("network-worker-bound" in r for r in map(str, rec.reasons))
    assert rec.gpus == 1


def test_plan_contract_fields_and_recommended_gpus():
    inp = workload_from_dict({"param_bytes": 50 * MB, "batch_size": 64, "step_s": 0.25})
    p = plan(inp, Cluster(nodes=16, network="100GbE", architecture="allreduce"))
    d = p.to_dict()
    for k in ("inputs", "sweep", "recommendation", "warnings", "estimate"):
        assert k in d
    for k in ("gpus", "nodes", "architecture", "num_ps", "compute_s", "comm_s", "io_s",
              "step_s", "samples_per_s", "speedup", "efficiency", "overhead_ratio",
              "bottleneck"):
        assert k in d["sweep"][0]
    for k in ("batch_size", "algorithm", "gpus", "num_ps", "num_ps_min",
              "network_gbps_needed", "loader_workers", "reasons"):
        assert k in d["recommendation"]
    assert {r["architecture"] for r in d["sweep"]} == {"ps", "allreduce", "hierarchical"}
    ring = [r for r in p.sweep if r.architecture == "allreduce"]
    assert [r.gpus for r in ring] == list(range(1, 17))
    # ring of 16 over 100GbE payload: comm = 2*15/16*50e6/(94.93e9/8) = 7.9 ms
    assert ring[-1].comm_s == pytest.approx(2 * 15 / 16 * 50e6 / (94.93e9 / 8), rel=1e-6)
    # DDP's 25 MiB buckets: 2 buckets; backward (2/3 of 0.25 s) hides all but the last
    assert ring[-1].efficiency == pytest.approx(0.25 / (0.25 + ring[-1].comm_s / 2))
    assert p.recommendation.gpus == 16
    stated = plan(inp, Cluster(nodes=16, network="100GbE", architecture="allreduce",
                               overlap=0.0))
    last = [r for r in stated.sweep if r.architecture == "allreduce"][-1]
    assert last.efficiency == pytest.approx(0.25 / (0.25 + last.comm_s))


def test_target_efficiency_limits_gpus():
    inp = workload_from_dict({"param_bytes": 100 * MB, "batch_size": 32, "step_s": 0.1})
    c = Cluster(nodes=32, network_gbps=10)  # not named: the target sets the count
    only = ("allreduce",)
    loose = plan(inp, c, PlanOptions(target_efficiency=0.3, architectures=only)).recommendation
    tight = plan(inp, c, PlanOptions(target_efficiency=0.9, architectures=only)).recommendation
    assert loose.gpus > tight.gpus
    with pytest.raises(UsageError, match=r"target efficiency must be in \(0, 1\]"):
        PlanOptions(target_efficiency=0)
    with pytest.raises(UsageError, match=r"target efficiency"):
        PlanOptions(target_efficiency=1.2)


def test_cpu_profile_on_gpu_target_is_an_assumed_mfu_estimate(tmp_path):
    path = write_profile(tmp_path / "p.json", step_s=2.0, batch=32, flops_per_sample=4e9)
    p = plan(load_profile(path), Cluster(device="A100-SXM-80GB", network="100GbE"))
    expected = 4e9 * 32 / (156e12 * 0.4)  # PyTorch's default on an A100: TF32
    assert p.inputs["compute_s"] == pytest.approx(expected)
    assert p.estimate is True and p.to_dict()["estimate"] is True
    assert any("assumption" in w and "0.4" in w for w in map(str, p.warnings))
    p2 = plan(load_profile(path), Cluster(device="A100-SXM-80GB", network="100GbE"),
              PlanOptions(default_mfu=0.5))
    assert p2.inputs["compute_s"] == pytest.approx(4e9 * 32 / (156e12 * 0.5))


def test_gpu_profile_scales_by_peak_ratio(tmp_path):
    path = write_profile(tmp_path / "p.json", step_s=0.3, batch=32, device="cuda",
                         device_name="NVIDIA A100-SXM4-80GB", algorithm="bf16_autocast")
    p = plan(load_profile(path), Cluster(device="H100-SXM", network="100GbE"))
    assert p.inputs["compute_s"] == pytest.approx(0.3 * 312 / 989.5)
    assert p.estimate
    same = plan(load_profile(path), Cluster(device="A100-SXM-80GB", network="100GbE"))
    assert same.inputs["compute_s"] == pytest.approx(0.3) and not same.estimate
    none = plan(load_profile(path), Cluster(network="100GbE"))
    assert none.inputs["compute_s"] == pytest.approx(0.3) and not none.estimate


def test_io_loader_workers_from_profile(tmp_path):
    path = write_profile(tmp_path / "p.json", step_s=0.2, batch=32, load_s_per_batch=0.5)
    p = plan(load_profile(path), Cluster(network="10GbE"))
    assert p.recommendation.loader_workers == 3  # ceil(0.5 / 0.2)
    assert p.inputs["io_s"] == 0.0
    few = plan(load_profile(path), Cluster(network="10GbE"), PlanOptions(loader_workers=1))
    assert few.inputs["io_s"] == pytest.approx(0.3)  # 0.5/1 - 0.2
    assert few.sweep[0].bottleneck == "io"


def test_large_global_batch_warns_goyal():
    inp = workload_from_dict({"param_bytes": 10 * MB, "batch_size": 256, "step_s": 0.5})
    p = plan(inp, Cluster(nodes=64, network="100GbE", architecture="allreduce"))
    assert p.recommendation.gpus * 256 > 8192
    assert any("Goyal" in w for w in map(str, p.warnings))


def test_an_assumed_intra_node_link_is_a_warning():
    inp = workload_from_dict({"param_bytes": 10 * MB, "batch_size": 32, "step_s": 0.1})

    def warned(**cluster):
        p = plan(inp, Cluster(nodes=2, network="10GbE", **cluster))
        return any("no intra-node link given" in str(w) for w in p.warnings)

    assert warned(gpus_per_node=4)  # PCIe 3.0 assumed between the node's GPUs
    assert not warned(gpus_per_node=4, intra_node="nvlink3")
    assert not warned(gpus_per_node=4, intra_node_gbps=200)
    assert not warned(gpus_per_node=4, device="H100-SXM")  # the device's own link
    assert not warned(gpus_per_node=1)  # nothing moves inside a node


def test_cost_per_1k_samples():
    inp = workload_from_dict({"param_bytes": 10 * MB, "batch_size": 100, "step_s": 0.5})
    p = plan(inp, Cluster(nodes=4, network="100GbE", price_per_gpu_hour=3.6))
    one = next(r for r in p.sweep if r.gpus == 1)
    # 200 samples/s at 3.6 per hour = 0.001 per second: 0.005 per 1,000 samples
    assert one.cost_per_1k_samples == pytest.approx(0.005)
    assert p.recommendation.cheapest is not None
    assert any(str(r).startswith("cost:") for r in p.recommendation.reasons)


def test_calibration_params_reach_the_sweep(tmp_path):
    cal = write_json(tmp_path / "cal.json", "calibration",
                     {"params": {"bandwidth_efficiency": 0.5, "latency_s": 0.0}})
    params = planner.load_calibration(cal)
    inp = workload_from_dict({"param_bytes": 100 * MB, "batch_size": 32, "step_s": 0.1})
    c = Cluster(nodes=4, network_gbps=10, architecture="allreduce")
    base = plan(inp, c)
    slow = plan(inp, c, PlanOptions(params=params))
    b4 = next(r for r in base.sweep if r.gpus == 4 and r.architecture == "allreduce")
    s4 = next(r for r in slow.sweep if r.gpus == 4 and r.architecture == "allreduce")
    assert s4.comm_s == pytest.approx(2 * b4.comm_s)
    bad = write_json(tmp_path / "bad.json", "calibration", {"params": {"overlap": 3}})
    with pytest.raises(UsageError, match="overlap"):
        planner.load_calibration(bad)


def test_sweep_uses_predict_step():
    inp = workload_from_dict({"param_bytes": 100 * MB, "batch_size": 32, "step_s": 0.1})
    c = Cluster(nodes=3, gpus_per_node=4, network="25GbE", intra_node="nvlink3", ps=2)
    p = plan(inp, c)
    row = next(r for r in p.sweep if r.architecture == "ps" and r.gpus == 10)
    direct = step(
        StepWorkload(100 * MB, 0.1), "ps", workers=10, num_ps=2,
        worker_bandwidth_Bps=c.network_Bps(), ps_bandwidth_Bps=c.ps_network_Bps(),
        gpus_per_node=4, intra_bandwidth_Bps=300e9)
    assert row.step_s == pytest.approx(direct.step_s)
    assert row.nodes == 3 and row.num_ps == 2
    assert dataclasses.is_dataclass(p) and not math.isnan(row.efficiency)


def test_batch_that_does_not_fit_the_target_gpu_warns(tmp_path):
    from tests.toy_plan import profile_dict

    d = profile_dict(step_s=0.3, batch=32, device="cuda", device_name="NVIDIA A100-SXM4-80GB")
    d["fit"]["memory_bytes"] = {"intercept": 2 * 2**30, "per_sample": 2**30}  # 34 GiB at 32
    path = write_json(tmp_path / "p.json", "profile", d)
    p = plan(load_profile(path), Cluster(device="T4", network="10GbE"))
    # 0.9 * 16 GiB = 14.4 GiB: (14.4 - 2) / 1 -> batch <= 12
    assert any("use batch <= 12" in w for w in map(str, p.warnings))
    ok = plan(load_profile(path), Cluster(device="H100-SXM", network="10GbE"))
    assert not any("GiB" in w for w in map(str, ok.warnings))


def test_single_node_is_limited_by_its_device_link():
    inp = workload_from_dict({"param_bytes": 1_000 * MB, "batch_size": 32, "step_s": 0.05})
    p = plan(inp, Cluster(gpus_per_node=8, intra_node="pcie3", network="10GbE",
                          architecture="allreduce", overlap=0.0))
    top = next(r for r in p.sweep if r.gpus == 8 and r.architecture == "allreduce")
    assert top.bottleneck == "intra-node"
    assert top.comm_s == pytest.approx(2 * 7 / 8 * 1e9 / 15.75e9)
    rec = p.recommendation
    assert rec.network_gbps_needed == 0.0
    # 2*7/8 * 1 GB within 0.05 * (1/0.8 - 1) = 12.5 ms: 140 GB/s = 1120 Gb/s
    assert rec.intra_node_gbps_needed == pytest.approx(1120, rel=1e-6)
    assert any("intra-node link too slow" in r for r in map(str, rec.reasons))
    # DDP's buckets: 39 of 25 MiB; 12.5 ms may show, the rest hides behind backward
    # (2/3 x 50 ms): exchange up to 12.5 ms + 33.3 ms x 38/39 = 44.98 ms -> 311 Gb/s
    ddp = plan(inp, Cluster(gpus_per_node=8, intra_node="pcie3", network="10GbE",
                            architecture="allreduce")).recommendation
    allowed = 0.0125 + 0.05 * 2 / 3 * 38 / 39
    assert ddp.intra_node_gbps_needed == pytest.approx(1.75e9 / allowed * 8 / 1e9, rel=1e-6)
