"""The host's share of a step: it is never shorter than the host's time to issue its
operations, measured where the profile runs and carried to the target as a stated
assumption."""

from __future__ import annotations

import pytest
from torch import nn

from scalelab.errors import UsageError
from scalelab.hardware.estimate import estimate_step
from scalelab.opcount import step_ops
from scalelab.plan import Cluster, PlanOptions, plan, workload_from_dict
from scalelab.plan.compute import target_compute
from scalelab.profiler.host import measure_host_s_per_op
from scalelab.theory.roofline import host_step_s, step_with_host_s
from scalelab.workload import WorkloadSpec


def test_the_step_is_at_least_the_hosts_time():
    assert host_step_s(500, 20e-6) == pytest.approx(0.01)
    assert step_with_host_s(0.004, 0.01) == 0.01
    assert step_with_host_s(0.03, 0.01) == 0.03
    with pytest.raises(ValueError):
        host_step_s(-1, 1e-6)
    with pytest.raises(ValueError):
        step_with_host_s(-1.0, 0.0)


def test_host_time_per_operation_is_measured_on_this_cpu():
    h = measure_host_s_per_op(blocks=8, repeats=3)
    assert 1e-7 < h.s_per_op < 1e-2 and h.ops > 8 * 3
    assert "least CPU time" in h.method and "over 3" in h.method
    with pytest.raises(ValueError):
        measure_host_s_per_op(blocks=0)


def test_autocast_adds_its_casts_to_the_hosts_operations():
    ops = step_ops("resnet18", 8)
    net = WorkloadSpec("resnet18").build_model(seed=0)
    weights = sum(1 for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))
                  for _ in m.parameters(recurse=False))
    assert ops.cast_weights == weights == 22  # 20 convolutions + the classifier's weight, bias
    names = [o.name for o in ops.ops if o.phase == "forward"]
    fp32_ops = names.count("_log_softmax") + names.count("nll_loss_forward")
    assert fp32_ops == 2  # the loss: log-softmax and NLL stay fp32 under autocast
    assert ops.host_ops("bf16") - ops.host_ops("fp32") == 2 * (weights + 2 * fp32_ops)
    assert ops.host_ops("fp32") == len(ops.ops) - 1 + ops.ops[-1].kernels  # + optimizer


def test_a_small_batch_is_set_by_the_host():
    ops = step_ops("resnet18", 4)
    device_only = estimate_step(ops, "H200", "bf16")
    est = estimate_step(ops, "H200", "bf16", host_s_per_op=50e-6)
    host = ops.host_ops("bf16") * 50e-6
    assert device_only.step_s < host
    assert est.step_s == pytest.approx(host) and est.bound == "host"
    assert est.device_s == pytest.approx(device_only.step_s) and "sets the step" in est.how
    big = step_ops("resnet18", 256)
    assert estimate_step(big, "H200", "fp32", host_s_per_op=1e-6).bound != "host"


def test_the_plan_states_the_hosts_assumption_and_when_it_sets_the_step():
    inp = workload_from_dict({"model": "resnet18", "batch_size": 4, "step_s": 0.5,
                              "device": "cpu", "host_s_per_op": 60e-6})
    c = Cluster(nodes=1, gpus_per_node=1, device="H200", network="100GbE",
                architecture="allreduce")
    tc = target_compute(inp, 0.5, 4, c, PlanOptions(precision="bf16"))
    ops = step_ops("resnet18", 4)
    assert tc.host_bound and tc.compute_s == pytest.approx(ops.host_ops("bf16") * 60e-6)
    assert any("60 us, as measured where the step was (cpu)" in r for r in tc.reasons)
    assert any("host sets the step" in w for w in tc.warnings)
    # at the profile's own batch (fixed) the host sets the step and the plan says so; left
    # to the plan, the target's batch is chosen past the host floor
    out = plan(inp, c, PlanOptions(precision="bf16", batch_size=4))
    assert any("host sets the step" in str(w) for w in out.warnings)
    free = plan(inp, c, PlanOptions(precision="bf16"))
    assert free.recommendation.batch_size > 4


def test_a_workload_host_time_must_be_positive():
    with pytest.raises(UsageError, match="host_s_per_op"):
        workload_from_dict({"model": "resnet18", "batch_size": 4, "step_s": 0.5,
                            "host_s_per_op": 0})


def test_the_host_time_is_fitted_per_machine_where_its_host_sets_steps():
    """The H200 rows' bf16 steps of small networks sit on their host's floor: the fit finds
    one host time per operation for that machine, shared by its fp32 and bf16 points, and
    moves it from the packaged measurement only there (the RTX 3090's large batches never
    reach their floor)."""
    from scalelab.hardware.fit import fit
    from scalelab.hardware.reference import reference

    f = fit()
    h0 = reference().host_s_per_op
    h200 = {c: v for (d, c), v in f.devices.items() if d == "H200"}
    assert h200["half"].host_bound >= 1 and h200["half"].host_s_per_op > h0
    assert h200["tf32"].host_s_per_op == h200["half"].host_s_per_op
    h, where = f.host_s_per_op("H200")
    assert h == h200["half"].host_s_per_op and "fitted to H200" in where
    assert f.host_s_per_op("RTX-3090")[0] == h0
    assert all(v.host_bound == 0 for (d, _), v in f.devices.items() if d == "RTX-3090")


def test_the_plan_takes_the_target_hosts_fitted_time_when_none_is_measured():
    from scalelab.hardware.fit import fit

    inp = workload_from_dict({"model": "resnet18", "batch_size": 4, "step_s": 0.5,
                              "device": "cpu"})
    c = Cluster(nodes=1, gpus_per_node=1, device="H200", network="100GbE",
                architecture="allreduce")
    tc = target_compute(inp, 0.5, 4, c, PlanOptions(precision="bf16"))
    h = fit().host_s_per_op("H200")[0]
    assert tc.host_bound
    assert tc.compute_s == pytest.approx(step_ops("resnet18", 4).host_ops("bf16") * h)
    assert any(f"{h * 1e6:.3g} us, fitted to H200's reference points" in r for r in tc.reasons)


def test_a_profiles_cpu_host_time_yields_to_the_targets_fitted_one():
    """A profile times CPU operations that launch no GPU kernel: where the target's own rows
    show its host's issue time, the plan takes that, and says so; elsewhere the profile's."""
    from dataclasses import replace

    from scalelab.hardware.fit import fit

    profile = replace(workload_from_dict({"model": "resnet18", "batch_size": 4, "step_s": 0.5,
                                          "device": "cpu"}), source="profile",
                      host_s_per_op=20e-6)
    n = step_ops("resnet18", 4).host_ops("bf16")
    h200 = Cluster(nodes=1, gpus_per_node=1, device="H200", network="100GbE",
                   architecture="allreduce")
    h = fit().own_host_s_per_op("H200")[0]
    tc = target_compute(profile, 0.5, 4, h200, PlanOptions(precision="bf16"))
    assert tc.host_bound and tc.compute_s == pytest.approx(n * h) and h != 20e-6
    assert any("fitted to H200's reference points" in r and "not the profile's 20 us" in r
               for r in tc.reasons)
    # a device whose rows never sat on their host's floor takes the profile's time
    a100 = replace(h200, device="A100-SXM-80GB")
    assert fit().own_host_s_per_op("A100-SXM-80GB") is None
    tc = target_compute(profile, 0.5, 4, a100, PlanOptions(precision="bf16"))
    assert tc.host_s == pytest.approx(n * 20e-6)
    assert any("20 us, as measured where the step was (cpu)" in r for r in tc.reasons)
    # a workload file's figure is the user's: it stands even where a fitted one exists
    stated = replace(profile, source="workload")
    tc = target_compute(stated, 0.5, 4, h200, PlanOptions(precision="bf16"))
    assert tc.compute_s == pytest.approx(n * 20e-6)
