"""The batch and the precision chosen for the target device (scalelab.plan.target)."""

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from scalelab import hardware
from scalelab.plan import Cluster, PlanOptions, plan, profile_from_dict, workload_from_dict
from scalelab.plan.target import HostTime, _weighed, pick_precision, precision_curve

DATA = Path(__file__).parent / "data"
# made on this 2-core machine while it was busy: `scalelab profile resnet50 --batch-sizes
# 2,4,8 --algorithms none --steps 3` (its host time per operation, 69.5 us, is a loaded one)
R50 = json.loads((DATA / "profile-resnet50-cpu.json").read_text())
H100 = dict(nodes=4, gpus_per_node=8, device="H100-SXM", network="IB-NDR")


def _fake(device_us_per_sample: float, ops: int):
    """An estimator whose device time is linear in the batch and whose host time is
    ops x h: a host-bound step at small batches."""
    def estimate(b, precision, channels_last, h):
        dev = b * device_us_per_sample * 1e-6
        host = ops * h
        return SimpleNamespace(step_s=max(dev, host), device_s=dev, host_s=host)
    return estimate


HOST = HostTime(28e-6, 28e-6, 47e-6, "test")


def test_the_batch_is_the_smallest_within_the_band_even_with_the_slowest_host():
    c = precision_curve(_fake(270, 532), "bf16", True, [2, 4, 8, 16, 32, 64, 128, 256],
                        HOST, 0.11)
    best = max(p.samples_per_s for p in c.points)
    assert c.chosen.samples_per_s >= best / 1.11
    assert c.chosen.samples_per_s_slow_host >= best / 1.11
    # with the host at 28 us batch 64 would do (host 14.9 ms < device 17.3 ms); at 47 us not
    assert c.chosen.batch_size == 128 and c.host_moved
    assert c.algorithm == "bf16_autocast+channels_last"


def test_precision_beyond_the_band_wins_and_a_tie_goes_to_the_shorter_device_time():
    batches = [2, 4, 8, 16, 32, 64, 128, 256]
    fp32 = precision_curve(_fake(560, 414), "fp32", False, batches, HOST, 0.22)
    bf16 = precision_curve(_fake(270, 532), "bf16", True, batches, HOST, 0.11)
    win, why = pick_precision([fp32, bf16])
    assert win is bf16 and "beyond the model's band" in why and "fp32" in why
    # host-bound at every batch: throughputs within the band, bf16's device time shorter
    slow = HostTime(28e-6, 28e-6, 28e-6, "test")
    a = precision_curve(_fake(20, 414), "fp32", False, [64, 128], slow, 0.11)
    b = precision_curve(_fake(8, 450), "bf16", True, [64, 128], slow, 0.11)
    win, why = pick_precision([a, b])
    assert win is b and "within the model's band" in why and "shorter device time" in why


def test_the_half_precision_weighed_is_what_the_device_has_units_for():
    assert _weighed(hardware.device("H100-SXM"), None) == ("fp32", "bf16")
    assert _weighed(hardware.device("V100-SXM2-16GB"), None) == ("fp32", "fp16")
    assert _weighed(hardware.device("V100-SXM2-16GB"), "fp32") == ("fp32",)


@pytest.fixture(scope="module")
def h100_plan():
    return plan(profile_from_dict(R50, "r50"), Cluster(**H100))


@pytest.mark.slow
def test_a_cpu_profile_of_resnet50_plans_bf16_channels_last_and_a_batch_for_the_h100(h100_plan):
    rec = h100_plan.recommendation
    assert rec.precision == "bf16" and rec.channels_last
    assert "--algorithm bf16_autocast+channels_last" in rec.launch
    assert rec.batch_size >= 128 and f"--batch-size {rec.batch_size}" in rec.launch
    curve = next(c for c in rec.target["curves"] if c["precision"] == "bf16")
    assert curve["batch_size"] == rec.batch_size
    assert curve["samples_per_s"] >= curve["best_samples_per_s"] / (1 + curve["band"])
    text = "\n".join(r.text for r in rec.reasons)
    assert "its times are not used for H100-SXM" in text  # where the numbers came from
    assert "against fp32" in text and "host time per operation" in text


@pytest.mark.slow
def test_a_loaded_profile_host_time_is_replaced_by_the_quiet_one(h100_plan):
    rec = h100_plan.recommendation
    assert rec.target["host_s_per_op"] == pytest.approx(28e-6)
    warned = [w.text for w in h100_plan.warnings if "loaded machine" in w.text]
    assert len(warned) == 1 and "69.5 us" in warned[0] and "28 us" in warned[0]
    # the profiler's own flag, as profile.json now stores it
    data = copy.deepcopy(R50)
    data["environment"]["busy"] = False
    data["host"].update(loaded=True, others_share=0.72, load_average=3.3, cpus=2)
    inp = profile_from_dict(data, "r50")
    assert "72% of its 2 cores" in inp.host_loaded
    data["host"]["loaded"] = False
    assert profile_from_dict(data, "r50").host_loaded is None


def _small(device: str = "cpu", **kw):
    return workload_from_dict({"model": "resnet18", "input_shape": [3, 32, 32],
                               "num_classes": 10, "batch_size": 8, "step_s": 0.5,
                               "device": device, **kw})


def test_precision_and_batch_size_still_fix_them():
    c = Cluster(nodes=1, gpus_per_node=8, device="A100-SXM-80GB", network="100GbE")
    rec = plan(_small(), c, PlanOptions(precision="fp32", batch_size=48)).recommendation
    assert rec.precision == "fp32" and rec.batch_size == 48 and not rec.channels_last
    assert "--algorithm" not in rec.launch and "--batch-size 48" in rec.launch
    assert any("as asked" in r.text for r in rec.reasons if r.topic == "batch")


def test_a_measurement_on_the_target_itself_decides():
    c = Cluster(nodes=1, gpus_per_node=8, device="A100-SXM-80GB", network="100GbE")
    rec = plan(_small("A100-SXM-80GB"), c).recommendation
    assert rec.target is None and rec.batch_size == 8


def test_fp16_is_weighed_where_only_fp16_units_but_not_under_parameter_servers():
    v100 = dict(nodes=2, gpus_per_node=4, device="V100-SXM2-16GB", network="100GbE")
    rec = plan(_small(), Cluster(**v100, architecture="allreduce")).recommendation
    assert [c["precision"] for c in rec.target["curves"]] == ["fp32", "fp16"]
    ps = plan(_small(), Cluster(**v100, architecture="ps")).recommendation
    assert [c["precision"] for c in ps.target["curves"]] == ["fp32"]
    assert "fp16_autocast" not in ps.launch
