"""The runner on a GPU (``gpu`` marker: skipped without CUDA; benchmarks/gpu_check.sh runs it).

- DDP on NCCL at world size 1 ends with the parameters of one process at the same batch.
- Synthetic batches are drawn on the GPU (no host work per step), the same numbers in every
  process for the same (seed, step, worker).
- Parameter servers with GPU workers (pinned host staging) and CPU servers end with the
  parameters of one process at batch W*b, within 1e-5 relative; two workers share one GPU
  when the host has one (Gloo allows it; NCCL ranks never share).
"""

import pytest
import torch

from scalelab.runner import RunConfig, run_training
from scalelab.runner.data import global_batch, make_shards
from scalelab.workload import WorkloadSpec, logits_of

pytestmark = [pytest.mark.gpu, pytest.mark.dist]

B, STEPS = 4, 5


def one_process(spec: WorkloadSpec, workers: int) -> dict[str, torch.Tensor]:
    """One process on the CPU at batch workers*B on the union of the workers' shards (drawn
    on the GPU, as the GPU workers draw them)."""
    model = spec.build_model(seed=0)
    opt = spec.make_optimizer(model.parameters())
    shards = make_shards(spec, None, 0, workers, B, device="cuda")
    for step in range(STEPS):
        x, y = (t.cpu() for t in global_batch(shards, step))
        opt.zero_grad()
        spec.loss_fn()(logits_of(model(x)), y).backward()
        opt.step()
    return {n: p.detach() for n, p in model.named_parameters()}


def _checksum(params: dict) -> float:
    return float(sum(p.double().pow(2).sum() for p in params.values()))


def _check(result: dict, path, spec: WorkloadSpec, workers: int) -> None:
    expected = one_process(spec, workers)
    found = torch.load(path, weights_only=True)
    for n, p in expected.items():
        rel = (found[n] - p).abs().max() / p.abs().max()
        assert rel <= 1e-5, f"{n}: relative difference {rel:.3g}"
    want = _checksum(expected)
    assert abs(result["final_param_checksum"] - want) <= 1e-5 * want
    assert result["config"]["device"] == "cuda"


@pytest.fixture(autouse=True)
def _strict_fp32(monkeypatch):
    """No TF32 in the ranks' cuBLAS/cuDNN (cuDNN convolutions use it by default on Ampere
    and later), so the GPU run can be held to 1e-5 against the CPU reference."""
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")


def test_ddp_on_nccl_at_world_size_one(tmp_path):
    spec = WorkloadSpec("tests.toy_runner:wide", input_shape=(6,), num_classes=3, lr=0.05)
    out = tmp_path / "p.pt"
    result = run_training(RunConfig(workload=spec, workers=1, architecture="allreduce",
                                    batch_size=B, steps=STEPS, device="cuda",
                                    final_params_path=str(out)))
    _check(result, out, spec, 1)


@pytest.mark.parametrize("workers,ps,piece_bytes", [(1, 1, None), (2, 2, 256)])
def test_gpu_workers_with_cpu_servers_match_one_process(workers, ps, piece_bytes, tmp_path):
    spec = WorkloadSpec("tests.toy_runner:convnet", input_shape=(1, 6, 6), num_classes=3,
                        lr=0.05)
    out = tmp_path / "p.pt"
    result = run_training(RunConfig(workload=spec, workers=workers, ps=ps, batch_size=B,
                                    steps=STEPS, piece_bytes=piece_bytes, device="cuda",
                                    final_params_path=str(out)))
    _check(result, out, spec, workers)
    staged = result["bytes_per_step"]["worker"]
    assert staged["bytes_staged_d2h"] == staged["bytes_staged_h2d"] == result["param_bytes"]


def test_synthetic_batches_are_made_on_the_device_and_reproducible():
    spec = WorkloadSpec("tests.toy_runner:convnet", input_shape=(1, 6, 6), num_classes=3)
    a = make_shards(spec, None, 7, 2, B, device="cuda").shard(3, 1)
    b = make_shards(spec, None, 7, 2, B, device="cuda").shard(3, 1)
    assert a[0].device.type == "cuda" and a[1].device.type == "cuda"
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = make_shards(spec, None, 7, 2, B, device="cuda").shard(4, 1)
    assert not torch.equal(a[0], c[0])


def test_a_gpu_run_times_with_events_and_trains_in_bf16_channels_last(tmp_path, monkeypatch):
    # the probe model writes, from each rank, the input's and weight's memory format and
    # the dtype its convolution computed in on the device
    monkeypatch.setenv("TOY_PROBE_DIR", str(tmp_path))
    spec = WorkloadSpec("tests.toy_runner:probe", input_shape=(3, 6, 6), num_classes=3)
    result = run_training(RunConfig(workload=spec, workers=1, architecture="allreduce",
                                    batch_size=B, steps=STEPS, device="cuda",
                                    algorithm="channels_last+bf16_autocast"))
    seen = set((tmp_path / "rank0.txt").read_text().splitlines())
    assert seen == {"channels_last channels_last torch.bfloat16 cuda"}
    assert "CUDA events" in result["timing"]["clock"]
    assert result["steps"]["step_s"]["median"] > 0
    assert result["steps"]["data_s"]["median"] < result["steps"]["step_s"]["median"]
