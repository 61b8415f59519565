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
    from scalelab.hardware.fit import fit
    from scalelab.opcount import step_ops

    row = check.predict("resnet18", 32, "bf16", "NVIDIA H200", 30e-6)
    # the host time a plan takes from a profile: the H200's own fitted one, not the CPU's
    h = fit().own_host_s_per_op("H200")[0]
    # measured in channels_last, so predicted in it: NCHW convolutions under autocast differ
    ops = replace(step_ops("resnet18", 32), channels_last=True)
    est = estimate_step(ops, "H200", "bf16", host_s_per_op=h)
    assert row["device"] == "H200" and row["predicted_step_s"] == pytest.approx(est.step_s)
    nchw = estimate_step(step_ops("resnet18", 32), "H200", "bf16", host_s_per_op=h)
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


def test_every_row_is_on_disk_before_the_next_is_measured(check, monkeypatch, tmp_path):
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

    def fake_measure(model, batch, precision, warmup, steps):
        seen.append(len(json.loads(out.read_text())["rows"]) if out.exists() else None)
        if batch == 64:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB\nmore text")
        return 0.01 * batch / 32

    monkeypatch.setattr(check, "measure", fake_measure)
    assert check.main(["--models", "resnet18", "--batches", "32,64,128", "--precisions",
                       "fp32", "--out", str(out)]) == 0
    assert seen == [None, 1, 2]  # each measurement starts with every earlier row written
    got = json.loads(out.read_text())
    assert got["complete"] and [r["batch"] for r in got["rows"]] == [32, 64, 128]
    assert got["rows"][1]["error_text"] == "CUDA out of memory. Tried to allocate 2 GiB"
    assert got["summary"]["points"] == 2
