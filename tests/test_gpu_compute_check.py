"""benchmarks/gpu_compute_check.py: the parts that run without a GPU."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_compute_check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_compute_check", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_without_cuda_it_says_so_in_one_line(check, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check.main(["--models", "resnet18", "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0]
    assert not (tmp_path / "o.json").exists()


def test_bad_arguments_are_one_line(check, capsys):
    assert check.main(["--batches", "1,32"]) == 2
    assert check.main(["--precisions", "fp64"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "batches" in lines[0] and "fp64" in lines[1]


def test_the_prediction_is_the_plans_for_a_cpu_workload(check):
    from scalelab.hardware.estimate import estimate_step
    from scalelab.hardware.packaged import fit_and_bands
    from scalelab.opcount import step_ops

    row = check.predict("resnet18", 32, "bf16", "NVIDIA H200", 30e-6)
    # the plan's fit and the host time it takes from a profile: the H200's own fitted one,
    # not the CPU's
    f, b = fit_and_bands()
    h = f.own_host_s_per_op("H200")[0]
    # measured in channels_last, so predicted in it: NCHW convolutions under autocast differ
    ops = replace(step_ops("resnet18", 32), channels_last=True)
    est = estimate_step(ops, "H200", "bf16", f=f, b=b, host_s_per_op=h)
    assert row["device"] == "H200" and row["predicted_step_s"] == pytest.approx(est.step_s)
    nchw = estimate_step(step_ops("resnet18", 32), "H200", "bf16", f=f, b=b, host_s_per_op=h)
    assert nchw.device_s != pytest.approx(est.device_s)
    assert row["host_s_per_op"] == h and "not the profile's 30 us" in row["host_note"]
    assert row["host_s"] == pytest.approx(step_ops("resnet18", 32).host_ops("bf16") * h)
    other = check.predict("resnet18", 32, "bf16", "NVIDIA A100-SXM4-80GB", 30e-6)
    assert other["device"] == "A100-SXM-80GB" and other["host_s_per_op"] == 30e-6
    assert check.side_of("inception_v3") == 299 and check.side_of("vgg16") == 224
    with pytest.raises(ValueError, match="not a GPU"):
        check.predict("resnet18", 32, "fp32", "Some Unknown Accelerator", 30e-6)


def test_summary(check):
    rows = [{"measured_step_s": 0.1, "predicted_step_s": 0.11, "band": 0.15},
            {"measured_step_s": 0.2, "predicted_step_s": 0.1, "band": 0.2},
            {"measured_step_s": 0.1, "predicted_step_s": 0.1, "band": 0.1},
            {"error_text": "out of memory"}]
    s = check.summarize(rows)
    assert s["points"] == 3 and s["median_abs_error"] == pytest.approx(0.1)
    assert s["max_abs_error"] == pytest.approx(0.5) and s["within_band"] == pytest.approx(2 / 3)
    assert check.summarize([]) == {"points": 0}


def test_every_row_is_on_disk_before_the_next_is_measured(check, monkeypatch, tmp_path,
                                                          capsys):
    """A check stopped by gpu_check.sh's time cap keeps the rows it measured."""
    from types import SimpleNamespace

    import scalelab.profiler.host as host_mod

    out = tmp_path / "c.json"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(host_mod, "measure_host_s_per_op", lambda: SimpleNamespace(
        s_per_op=30e-6, method="stub", to_dict=lambda: {"s_per_op": 30e-6}))
    seen = []

    def fake_measure(model, batch, precision, warmup, steps, classes=False):
        seen.append(len(json.loads(out.read_text())["rows"]) if out.exists() else None)
        if batch == 64:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB\nmore text")
        got = {"measured_step_s": 0.01 * batch / 32}
        if classes:
            got["measured_classes"] = {"basis": "stub", "total_s": 0.03, "conv_small_input_s":
                                       0.002, "classes_s": {"conv": 0.02, "norm": 0.01}}
        return got

    monkeypatch.setattr(check, "measure", fake_measure)
    assert check.main(["--models", "resnet18", "--batches", "32,64,128", "--precisions",
                       "fp32", "--class-batches", "128", "--out", str(out)]) == 0
    assert seen == [None, 1, 2]  # each measurement starts with every earlier row written
    got = json.loads(out.read_text())
    assert got["complete"] and [r["batch"] for r in got["rows"]] == [32, 64, 128]
    assert got["rows"][1]["error_text"] == "CUDA out of memory. Tried to allocate 2 GiB"
    assert got["summary"]["points"] == 2
    # only the batch asked for is profiled, and its roofline per class is the H200's
    assert "predicted_classes" not in got["rows"][0]
    assert got["rows"][2]["predicted_classes"] == pytest.approx(
        check.predicted_classes("resnet18", 128, "fp32", "NVIDIA H200"))
    assert "conv 20.0/" in capsys.readouterr().out


def test_the_roofline_per_class_adds_up_to_the_devices_roofline(check):
    from scalelab.hardware.estimate import device_roofline
    from scalelab.hardware.packaged import fit_and_bands
    from scalelab.opcount import step_ops

    for precision, nhwc in (("fp32", False), ("bf16", True)):
        by = check.predicted_classes("mobilenet_v2", 128, precision, "NVIDIA H200")
        ops = replace(step_ops("mobilenet_v2", 128), channels_last=nhwc)
        whole = device_roofline(ops, "H200", precision, fit_and_bands()[0])
        assert sum(by.values()) == pytest.approx(whole.roofline_s)
        assert {"conv", "conv_grouped", "norm", "elementwise", "optimizer"} <= set(by)
        assert "conv_nchw" not in by


def test_a_real_steps_time_is_attributed_to_its_operation_classes(check):
    """On the CPU (each ATen operation's own time): every class mobilenet_v2 has, its first
    convolution (3 channels in) apart, and the total the sum of the classes."""
    torch.manual_seed(0)
    step = check.bare_step("mobilenet_v2", 2, "fp32", "cpu")
    step()
    got = check.class_times(step, "cpu")
    by = got["classes_s"]
    assert {"conv", "conv_grouped", "norm", "matmul", "optimizer", "elementwise"} <= set(by)
    assert all(v > 0 for v in by.values())
    assert got["total_s"] == pytest.approx(sum(by.values()))
    assert 0 < got["conv_small_input_s"] < by["conv"]


def test_autocasts_casts_are_not_the_convolutions_time(check):
    """Under autocast a convolution's input and weight casts run inside it: they are
    element-wise, the convolution's own kernels are conv."""
    from torch.profiler import ProfilerActivity, profile

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 3, groups=8))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            net(torch.randn(2, 3, 16, 16))
    events = prof.events()
    casts = [e for e in events if e.name == "aten::_to_copy"]
    convs = [e for e in events if e.name in ("aten::mkldnn_convolution", "aten::_convolution")]
    assert casts and convs
    assert {check.classify(e) for e in casts} == {("elementwise", False)}
    assert {check.classify(e) for e in convs} == {("conv", True), ("conv_grouped", False)}


@pytest.mark.gpu
def test_on_a_gpu_each_kernel_is_counted_once_under_its_class(check):
    step = check.bare_step("resnet18", 8, "fp32", "cuda")
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    got = check.class_times(step, "cuda")
    assert {"conv", "norm", "elementwise", "optimizer", "matmul", "pool"} <= set(got["classes_s"])
    assert 0 < got["conv_small_input_s"] < got["classes_s"]["conv"]
    # the kernels of one step fit inside the step measured around them (counted twice, the
    # launched kernels and the operations that launched them, they would not)
    step_s = check.measure("resnet18", 8, "fp32", 2, 5)["measured_step_s"]
    assert got["total_s"] <= 1.2 * step_s


def test_a_copy_inside_a_convolution_is_the_convolutions(check):
    """A layout copy the convolution makes (its input made contiguous) is its own time;
    only a cast is element-wise."""
    from types import SimpleNamespace as E

    conv = E(name="aten::convolution", input_shapes=[[2, 8, 16, 16], [8, 8, 3, 3]],
             cpu_parent=None)
    contiguous = E(name="aten::contiguous", input_shapes=[], cpu_parent=conv)
    copy = E(name="aten::copy_", input_shapes=[], cpu_parent=contiguous)
    cast = E(name="aten::_to_copy", input_shapes=[], cpu_parent=conv)
    cast_copy = E(name="aten::copy_", input_shapes=[], cpu_parent=cast)
    assert check.classify(copy) == ("conv", False)
    assert check.classify(cast_copy) == ("elementwise", False)
