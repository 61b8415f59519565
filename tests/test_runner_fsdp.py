"""Sharded data parallelism (``--architecture fsdp``, ZeRO-1/2/3) on Gloo: the same final
parameters as DDP, each rank's shards as the plan counts them, checkpoints resumed
bit-exact, a killed rank failing the run cleanly."""

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from scalelab.errors import RunFailure
from scalelab.runner import RunConfig, run_training
from scalelab.theory import zero
from scalelab.workload import WorkloadSpec

pytestmark = pytest.mark.dist

REPO = Path(__file__).resolve().parents[1]
SPEC = WorkloadSpec("tests.toy_runner:convnet", input_shape=(1, 6, 6), num_classes=3, lr=0.05)
LAYOUT = {1: "zero1", 2: "zero2", 3: "zero3"}


def _run(tmp_path, name, **kw):
    out = tmp_path / f"{name}.pt"
    kw.setdefault("architecture", "fsdp")
    kw.setdefault("steps", 5)
    kw.setdefault("workers", 2)
    kw.setdefault("device", "cpu")
    result = run_training(RunConfig(workload=kw.pop("spec", SPEC), batch_size=4,
                                    timeout_s=30,
                                    final_params_path=str(out), **kw))
    return result, torch.load(out, weights_only=True)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("ddp"), "ddp", architecture="allreduce")


@pytest.mark.parametrize("level", [1, 2, 3])
def test_final_parameters_equal_ddp_and_shards_equal_the_plan(level, ddp, tmp_path):
    ddp_result, expected = ddp
    result, found = _run(tmp_path, f"z{level}", shard_level=level)
    initial = {n: p.detach() for n, p in SPEC.build_model(seed=0).named_parameters()}
    assert found.keys() == expected.keys()
    for n in expected:
        assert not torch.equal(expected[n], initial[n]), f"{n} did not train"
        rel = (found[n] - expected[n]).abs().max() / expected[n].abs().max()
        assert rel <= 1e-5, f"zero{level} {n}: relative difference {rel:.3g}"
    assert result["final_param_checksum"] == pytest.approx(
        ddp_result["final_param_checksum"], rel=1e-5)
    # the same phases and bytes fields as DDP's, and the gathers on top
    assert set(result["steps"]) == set(ddp_result["steps"])
    worker = result["bytes_per_step"]["worker"]
    assert worker["bytes_reduced"] == ddp_result["bytes_per_step"]["worker"]["bytes_reduced"]
    assert worker["bytes_gathered"] == (2 if level == 3 else 1) * result["param_bytes"]
    # each rank's model state, counted from its tensors, is the plan's figure for the layout
    shapes = [tuple(t.shape) for t in expected.values()]
    for r, row in enumerate(result["per_rank"]):
        want = zero.rank_state_bytes(shapes, 2, r, LAYOUT[level])  # fp32, SGD momentum K=4
        assert row["model_state"] == {"param_bytes": want.param_bytes,
                                      "grad_bytes": want.grad_bytes,
                                      "optimizer_bytes": want.optimizer_bytes}, (level, r)
        assert {"peak_bytes", "baseline_bytes", "peak_model_bytes"} <= set(row["memory"])
    # and with shards this small, the paper's even split is within one row of each tensor
    total = sum(math.prod(s) for s in shapes)
    if level > 1:
        even = zero.model_state(total, 2, "zero3", param_bytes_per_param=4,
                                grad_bytes_per_param=4, optimizer_bytes_per_param=4)
        got = sum(row["model_state"]["param_bytes"] for row in result["per_rank"])
        assert got == 2 * even.param_bytes


FAULTY = WorkloadSpec("tests.toy_runner:faulty", input_shape=(6,), num_classes=3, lr=0.05)


@pytest.mark.parametrize("level", [1, 3])
def test_killed_and_resumed_run_ends_bit_exact(level, tmp_path, monkeypatch):
    kw = dict(spec=FAULTY, shard_level=level, steps=6, checkpoint_every=2)
    whole, whole_params = _run(tmp_path, "whole", checkpoint_dir=str(tmp_path / "w"), **kw)
    ckpt = tmp_path / "ckpt"
    monkeypatch.setenv("TOY_FAIL", "1:5:kill")
    with pytest.raises(RunFailure, match="rank 1 \\(worker 1\\)"):
        _run(tmp_path, "killed", checkpoint_dir=str(ckpt), **kw)
    monkeypatch.delenv("TOY_FAIL")
    assert sorted(p.name for p in ckpt.iterdir()) == ["fsdp-step00000002",
                                                      "fsdp-step00000004"]
    resumed, params = _run(tmp_path, "resumed", checkpoint_dir=str(ckpt), resume=True, **kw)
    assert resumed["resumed_from_step"] == 4
    for n in whole_params:
        assert torch.equal(params[n], whole_params[n]), n
    assert resumed["final_param_checksum"] == whole["final_param_checksum"]


def test_a_killed_rank_stops_the_sharded_run(tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_FAIL", "1:2:kill")
    t0 = time.monotonic()
    with pytest.raises(RunFailure) as e:
        run_training(RunConfig(workload=FAULTY, workers=2, architecture="fsdp", steps=6,
                               batch_size=4, timeout_s=10, device="cpu"))
    assert str(e.value).startswith("rank 1 (worker 1) failed: died (killed by SIGKILL)")
    assert time.monotonic() - t0 < 60


def test_cli_refuses_zero_without_fsdp_and_another_models_checkpoint(tmp_path):
    base = [sys.executable, "-m", "scalelab", "run", "tests.toy_runner:wide", "--input-shape",
            "6", "--num-classes", "3", "--workers", "2", "--quiet", "--device", "cpu",
            "--out", str(tmp_path / "r.json")]
    env = {**os.environ}
    p = subprocess.run(base + ["--zero", "2"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "--zero 2 needs --architecture fsdp" in p.stderr
    ckpt = tmp_path / "ck"
    run_training(RunConfig(workload=FAULTY, workers=2, architecture="fsdp", steps=2,
                           batch_size=4, timeout_s=30, device="cpu",
                           checkpoint_dir=str(ckpt), checkpoint_every=2))
    p = subprocess.run(base + ["--architecture", "fsdp", "--checkpoint-dir", str(ckpt),
                               "--resume"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "is from another model" in lines[0], p.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("level", [1, 3])
def test_on_a_gpu_the_sharded_run_equals_ddp_and_counts_cuda_memory(level, tmp_path):
    """NCCL, one GPU per rank (one or two ranks): the same parameters as DDP, and the peak
    from CUDA's allocator at least the state the rank holds."""
    n = min(torch.cuda.device_count(), 2)
    kw = dict(workers=n, device="cuda")
    ddp_result, expected = _run(tmp_path, "ddp", architecture="allreduce", **kw)
    result, found = _run(tmp_path, f"z{level}", shard_level=level, **kw)
    for name in expected:
        rel = (found[name] - expected[name]).abs().max() / expected[name].abs().max()
        assert rel <= 1e-5, f"zero{level} {name}: relative difference {rel:.3g}"
    for row in result["per_rank"]:
        mem = row["memory"]
        assert mem["peak_model_bytes"] >= sum(row["model_state"].values())


@pytest.mark.parametrize("algorithm", ["channels_last", "bf16_autocast"])
def test_the_computation_configuration_is_ddps(algorithm, tmp_path):
    _, expected = _run(tmp_path, "ddp", architecture="allreduce", algorithm=algorithm)
    _, found = _run(tmp_path, "z3", shard_level=3, algorithm=algorithm)
    for n in expected:
        rel = (found[n] - expected[n]).abs().max() / expected[n].abs().max()
        assert rel <= 1e-5, f"{algorithm} {n}: relative difference {rel:.3g}"


def test_fp16_loss_scaling_is_refused_for_sharded_runs():
    from scalelab.errors import UsageError

    with pytest.raises(UsageError, match="fp16 loss scaling is not built"):
        RunConfig(workload=SPEC, workers=2, architecture="fsdp", algorithm="fp16_autocast",
                  device="cpu")
