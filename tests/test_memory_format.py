"""The convolutions' memory format under autocast: NCHW convolutions take factors of their own
(class ``conv_nchw``), fitted to timm's RTX 3090 tables of the same 21 models in NCHW and in
NHWC; the plan keeps the measured configuration's format for the target."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scalelab import hardware
from scalelab.hardware.curve import roofline_ops
from scalelab.hardware.estimate import estimate_step
from scalelab.hardware.fit import fit, predict_step_s
from scalelab.hardware.reference import RefPoint, reference
from scalelab.opcount import step_ops
from scalelab.plan import Cluster, PlanOptions, workload_from_dict
from scalelab.plan.compute import target_compute


def _classes(ops, precision: str) -> set[str]:
    return {o.op_class for o in roofline_ops(ops, hardware.device("H200"), precision)}


def test_only_autocast_convolutions_in_nchw_are_their_own_class():
    ops = step_ops("resnet18", 8)
    assert "conv_nchw" in _classes(ops, "bf16") and "conv" not in _classes(ops, "bf16")
    nhwc = replace(ops, channels_last=True)
    assert "conv_nchw" not in _classes(nhwc, "bf16") and "conv" in _classes(nhwc, "bf16")
    assert "conv_nchw" not in _classes(ops, "fp32")  # no factor where no data has one


def test_a_point_says_its_memory_format_and_a_wrong_one_is_refused():
    p = next(p for p in reference().points if p.memory_format == "nhwc")
    assert p.ops().channels_last and not replace(p, memory_format="nchw").ops().channels_last
    with pytest.raises(ValueError, match="memory_format must be nchw or nhwc"):
        RefPoint("resnet18", "H200", "bf16", 32, 100.0, "here", memory_format="NHWC")


def test_the_fit_learns_that_nhwc_trains_faster_as_timms_tables_measured():
    pts = [p for p in reference().points if p.group == "timm-rtx3090-pt112"]
    nchw = {p.model: p for p in pts if p.memory_format == "nchw"}
    nhwc = {p.model: p for p in pts if p.memory_format == "nhwc"}
    assert len(nchw) == len(nhwc) == 21
    f = fit()
    kc, km = f.class_factors("RTX-3090", "fp16")["conv_nchw"]
    assert kc < 1 or km < 1  # NCHW convolutions slower than NHWC ones
    # resnet50, same batch: measured 1.47x the throughput in NHWC; predicted more than 1.2x
    a, b = nchw["resnet50"], nhwc["resnet50"]
    assert a.batch == b.batch and b.samples_per_s / a.samples_per_s == pytest.approx(1.475,
                                                                                     rel=0.01)
    assert predict_step_s(a, f) / predict_step_s(b, f) > 1.2
    # vit_b_16 has one convolution: the format changes next to nothing, measured or predicted
    v, w = nchw["vit_b_16"], nhwc["vit_b_16"]
    assert w.samples_per_s / v.samples_per_s == pytest.approx(1.0, abs=0.01)
    assert predict_step_s(v, f) / predict_step_s(w, f) == pytest.approx(1.0, abs=0.02)


def test_the_plan_keeps_the_measured_configurations_format_and_says_which():
    c = Cluster(device="H200", network="100GbE")
    opts = PlanOptions(precision="bf16")
    step, batch = 2.0, 256  # a CPU measurement: the target's step is the roofline alone

    def compute(algorithm: str):
        inp = workload_from_dict({"model": "resnet50", "batch_size": batch, "step_s": step,
                                  "device": "cpu", "algorithm": algorithm})
        return target_compute(inp, step, batch, c, opts)

    cl, plain = compute("channels_last"), compute("default")
    assert cl.estimate and plain.estimate and not (cl.host_bound or plain.host_bound)
    assert cl.compute_s < plain.compute_s
    assert "(bf16, channels_last as measured:" in cl.reasons[0]
    assert "NCHW convolutions as measured (no channels_last" in plain.reasons[0]
    ops = step_ops("resnet50", batch)
    for tc, o in ((cl, replace(ops, channels_last=True)), (plain, ops)):
        assert tc.compute_s == pytest.approx(estimate_step(o, "H200", "bf16").step_s)
