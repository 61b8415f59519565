"""Distributed training gives the parameters of one process at the global batch.

The models have no batch normalization (tests/toy_runner.py): with it, statistics over b
samples differ from statistics over W*b, and the two would rightly disagree.
"""

import pytest
import torch

from scalelab.runner import RunConfig, run_training
from scalelab.runner.data import global_batch
from scalelab.workload import WorkloadSpec, logits_of

pytestmark = pytest.mark.dist

MLP = WorkloadSpec("tests.toy_runner:mlp", input_shape=(6,), num_classes=3, lr=0.1)
CONV = WorkloadSpec("tests.toy_runner:conv", input_shape=(1, 8, 8), num_classes=3,
                    optimizer="adam", lr=0.01)


def reference(config: RunConfig) -> torch.Tensor:
    """One process, batch W*b, the same samples: the parameters after config.steps."""
    spec = config.workload
    model = spec.build_model(config.seed)
    opt = spec.make_optimizer(model.parameters())
    for step in range(config.steps):
        x, y = global_batch(config, step)
        opt.zero_grad()
        spec.loss_fn()(logits_of(model(x)), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _run(tmp_path, **kw):
    cfg = RunConfig(workers=2, batch_size=4, steps=5, threads=1, timeout_s=60,
                    final_params_path=str(tmp_path / "final.pt"), **kw)
    out = run_training(cfg)
    got = torch.load(tmp_path / "final.pt", weights_only=True)
    want = reference(cfg)
    assert not torch.equal(want, torch.cat([p.detach().reshape(-1) for p in
                                            cfg.workload.build_model(cfg.seed).parameters()]))
    rel = float((got - want).norm() / want.norm())
    assert rel < 1e-5, rel
    ref_checksum = float(want.double().pow(2).sum())
    assert out["final_param_checksum"] == pytest.approx(ref_checksum, rel=1e-5)
    return out


def test_sync_ps_balanced_pieces_equals_single_process(tmp_path):
    out = _run(tmp_path, workload=MLP, ps=2, partition="balanced", piece_bytes=64)
    assert out["partition"]["pieces"] > 2
    b = out["bytes_per_step"]
    n = sum(p.numel() for p in MLP.build_model(0).parameters())
    assert b["worker"]["push_bytes"] == b["worker"]["pull_bytes"] == 4 * n
    assert sum(s["shard_bytes"] for s in b["server"]) == 4 * n
    assert all(s["recv_bytes"] == 2 * s["shard_bytes"] for s in b["server"])
    for ph in ("compute_s", "push_s", "apply_s", "pull_s", "data_s", "step_s"):
        assert out["steps"][ph]["median"] >= 0


def test_sync_ps_tensor_partition_adam_conv_equals_single_process(tmp_path):
    _run(tmp_path, workload=CONV, ps=2, partition="tensor")


def test_ddp_equals_single_process(tmp_path):
    out = _run(tmp_path, workload=MLP, architecture="allreduce")
    assert out["steps"]["push_s"] is None
