"""Precision as the user means it: "fp32" is PyTorch's default, a measurement is carried to
another precision on its own device by the ratio of its rooflines, a precision the device
has no units for is refused, and the profile's FLOPs are the project's own count."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scalelab import hardware
from scalelab.errors import UsageError
from scalelab.hardware.estimate import device_roofline
from scalelab.opcount import describe, step_ops
from scalelab.plan import Cluster, PlanOptions, plan, workload_from_dict
from scalelab.plan.compute import target_compute, target_precision
from scalelab.workload import WorkloadSpec

MODEL, BATCH = "resnet18", 32


def _inp(device: str, step_s: float = 0.02, **extra):
    return workload_from_dict({"model": MODEL, "batch_size": BATCH, "step_s": step_s,
                               "device": device, **extra})


def test_another_precision_on_the_same_device_is_carried_by_the_roofline_ratio():
    # a step the H200's host does not set (218 operations x its fitted 47 us is 10 ms)
    inp = _inp("H200", 0.08)
    tc = target_compute(inp, 0.08, BATCH, Cluster(device="H200", network="100GbE"),
                        PlanOptions(precision="bf16"))
    ops = step_ops(MODEL, BATCH)
    ratio = (device_roofline(ops, "H200", "bf16", source=("H200", "fp32")).step_s
             / device_roofline(ops, "H200", "fp32").step_s)
    assert ratio < 0.95  # bf16 is faster on an H200: the measurement must not stay as is
    assert tc.estimate and tc.precision == "bf16"
    assert tc.compute_s == pytest.approx(0.08 * ratio, rel=1e-9) and not tc.host_bound
    assert "carried from fp32 (measured) to bf16" in tc.reasons[0]
    assert "ratio of its rooflines" in tc.reasons[0]
    # the precision it was measured in: the measurement itself
    same = target_compute(inp, 0.08, BATCH, Cluster(device="H200", network="100GbE"),
                          PlanOptions(precision="fp32"))
    assert same.compute_s == 0.08 and not same.estimate


def test_a_workload_without_algorithm_was_measured_in_fp32():
    c = Cluster(device="H200", network="100GbE")
    opts = PlanOptions(precision="bf16")
    step = 0.1  # long enough that the H200's host does not set the step
    bare = target_compute(_inp("A100-SXM-80GB", step), step, BATCH, c, opts)
    default = target_compute(_inp("A100-SXM-80GB", step, algorithm="default"), step, BATCH, c,
                             opts)
    half = target_compute(_inp("A100-SXM-80GB", step, algorithm="bf16_autocast"), step,
                          BATCH, c, opts)
    assert not (bare.host_bound or half.host_bound)
    assert bare.compute_s == pytest.approx(default.compute_s, rel=1e-12)
    assert bare.compute_s < half.compute_s  # an fp32 step is the slower source
    assert "(A100-SXM-80GB, fp32)" in bare.reasons[0]


def test_a_precision_the_device_has_no_units_for_is_refused():
    v100 = hardware.device("V100-SXM2-16GB")
    for p in ("bf16", "tf32"):
        with pytest.raises(UsageError, match=f"V100-SXM2-16GB has no {p} units"):
            target_precision(_inp("cpu"), Cluster(device="V100", network="100GbE"),
                             PlanOptions(precision=p), v100)
    assert target_precision(_inp("cpu"), Cluster(device="V100", network="100GbE"),
                            PlanOptions(precision="fp16"), v100)[0] == "fp16"


def test_cli_refuses_bf16_on_a_v100_in_one_line(tmp_path):
    w = tmp_path / "w.toml"
    w.write_text('model = "resnet18"\nbatch_size = 32\nstep_s = 1.0\ndevice = "cpu"\n')
    r = subprocess.run([sys.executable, "-m", "scalelab", "plan", "--workload", str(w),
                        "--nodes", "1", "--gpus-per-node", "1", "--device", "V100",
                        "--precision", "bf16", "--network", "100GbE",
                        "--out", str(tmp_path / "p.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no bf16 units" in lines[0] and "Traceback" not in r.stderr


def test_the_default_is_named_fp32_in_every_line():
    inp = _inp("cpu", 1.0)
    h200 = hardware.device("H200")
    p, why = target_precision(inp, Cluster(device="H200", network="100GbE"), PlanOptions(), h200)
    assert p == "fp32" and "TF32 convolutions, FP32 matrix products" in why
    out = plan(inp, Cluster(nodes=1, gpus_per_node=1, device="H200", network="100GbE",
                            architecture="allreduce"))
    text = " ".join(map(str, (*out.recommendation.reasons, *out.warnings)))
    assert "fp32" in text and "tf32" not in text.lower().replace("tf32 convolutions", "")


def test_profile_flops_are_the_operation_count():
    # FlopCounterMode gives mobilenet_v2 12.28 GFLOP per sample (it counts a depthwise
    # convolution's weight gradient over all channels); the operation count gives 1.78
    flops = describe(WorkloadSpec("mobilenet_v2")).flops_per_sample
    ops = step_ops("mobilenet_v2", 4)
    assert flops == pytest.approx((ops.flops - ops.phase_flops("optimizer")) / 4, rel=1e-9)
    assert 1.7e9 < flops < 1.9e9


@pytest.mark.parametrize("device, of, badge", [
    ("H200", "precision", "measured in another precision"),
    ("H100-SXM", "device", "measured on another device"),
])
def test_an_estimate_says_what_it_carried_the_measurement_across(tmp_path, capsys, device,
                                                                 of, badge):
    from scalelab.cli import main
    from scalelab.report import write_report
    from scalelab.results import read_json

    w = tmp_path / "w.toml"
    w.write_text('model = "resnet18"\nbatch_size = 32\nstep_s = 0.08\ndevice = "H200"\n')
    out = tmp_path / "plan.json"
    assert main(["plan", "--workload", str(w), "--nodes", "1", "--gpus-per-node", "1",
                 "--device", device, "--precision", "bf16", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    data = read_json(out, "plan")
    assert data["estimate"] and data["estimate_of"] == of
    warned = [w for w in data["warnings"] if w.startswith("estimate:")]
    if of == "precision":  # the same device: no word of another one
        assert warned == ["estimate: compute time carried from the fp32 measurement to bf16 "
                          "on H200; profile in bf16 to measure it"]
    else:
        assert warned == ["estimate: compute time scaled to another device; profile on the "
                          "target device to measure it"]
    assert warned[0] in " ".join(err.split())
    html = write_report([out], tmp_path / "report.html").read_text()
    assert f'<span class="badge">estimate: {badge}</span>' in html
    # a measured plan carries no estimate
    assert main(["plan", "--workload", str(w), "--nodes", "1", "--gpus-per-node", "1",
                 "--device", "H200", "--out", str(out)]) == 0
    assert read_json(out, "plan")["estimate_of"] is None
