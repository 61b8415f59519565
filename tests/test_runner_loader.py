"""Loader processes: the same batches as in-process decoding, in order, from any resume
step, shut down on every way out; and trained through them, PS and DDP still equal one
process at W*b."""

import os
from pathlib import Path

import pytest
import torch

from scalelab.cli import main
from scalelab.imagefolder import write_image_folder
from scalelab.runner import RunConfig, run_training
from scalelab.runner.data import global_batch, make_shards
from scalelab.runner.loader import LoaderShards, StepBatchSampler, open_shards
from scalelab.workload import WorkloadSpec, logits_of

W, B, STEPS = 2, 4, 5
SPEC = WorkloadSpec("tests.toy_runner:convnet", input_shape=(1, 6, 6), num_classes=3,
                    lr=0.05)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    # 12 images: 5 steps x 2 workers x 4 = 40 samples cross three epoch boundaries
    root = tmp_path_factory.mktemp("imgs")
    write_image_folder(root, images=12, size_px=32, classes=3, seed=3)
    return str(root)


def _children() -> set[int]:
    me = os.getpid()
    found = set()
    for task in Path(f"/proc/{me}/task").iterdir():
        try:
            text = (task / "children").read_text().split()
        except FileNotFoundError:  # a thread that ended while we listed them
            continue
        found.update(int(p) for p in text)
    return found


def test_loader_batches_equal_in_process_batches(folder):
    base = make_shards(SPEC, folder, seed=1, workers=W, batch_size=B)
    for procs in (0, 2):
        for k in range(W):
            with LoaderShards(base, k, STEPS, procs) as loader:
                for s in range(STEPS):
                    x, y = loader.shard(s, k)
                    ex, ey = base.shard(s, k)
                    assert torch.equal(x, ex) and torch.equal(y, ey), (procs, k, s)
    sampler = StepBatchSampler(base, 1, 2, 4)
    assert len(sampler) == 2 and list(sampler) == [base.indices(2, 1), base.indices(3, 1)]


def test_resume_and_out_of_order_steps_give_the_same_batches(folder):
    base = make_shards(SPEC, folder, seed=1, workers=W, batch_size=B)
    with LoaderShards(base, 0, STEPS, 2) as loader:
        assert torch.equal(loader.shard(3, 0)[0], base.shard(3, 0)[0])  # a resumed run
        assert torch.equal(loader.shard(4, 0)[0], base.shard(4, 0)[0])
        assert torch.equal(loader.shard(1, 0)[0], base.shard(1, 0)[0])  # restarted
        with pytest.raises(ValueError, match="serves worker 0, not 1"):
            loader.shard(2, 1)
        with pytest.raises(ValueError, match="outside the run's 5 steps"):
            loader.shard(5, 0)


def test_loader_processes_end_on_close_and_on_error(folder):
    before = _children()
    cfg = RunConfig(workload=SPEC, workers=W, batch_size=B, steps=STEPS, data=folder,
                    loader_workers=2, device="cpu")
    with open_shards(cfg, 0) as loader:
        loader.shard(0, 0)
        assert len(_children() - before) == 2
    assert _children() - before == set()
    with pytest.raises(RuntimeError, match="boom"), open_shards(cfg, 1) as loader:
        loader.shard(0, 1)
        assert len(_children() - before) == 2
        raise RuntimeError("boom")
    assert _children() - before == set()
    synthetic = RunConfig(workload=SPEC, workers=W, batch_size=B, steps=STEPS, device="cpu")
    with open_shards(synthetic, 0) as shards:
        assert shards.shard(0, 0)[0].shape == (B, 1, 6, 6)
    assert _children() - before == set()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_batches_in_pinned_memory_for_a_gpu(folder):
    base = make_shards(SPEC, folder, seed=1, workers=W, batch_size=B)
    with LoaderShards(base, 1, STEPS, 2, pin_memory=True) as loader:
        x, y = loader.shard(0, 1)
        assert x.is_pinned() and y.is_pinned()
        assert torch.equal(x, base.shard(0, 1)[0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_gpu_worker_gets_its_batches_on_the_device_one_step_ahead(folder):
    cfg = RunConfig(workload=SPEC, workers=W, batch_size=B, steps=STEPS, device="cuda",
                    data=folder, loader_workers=1)
    base = make_shards(SPEC, folder, seed=0, workers=W, batch_size=B)
    with open_shards(cfg, 1, device="cuda:0") as batches:
        x, y = batches.shard(0, 1)
        batches.prefetch(1)  # copied on the side stream while step 0 would train
        assert 1 in batches._ahead
        x1, _ = batches.shard(1, 1)
        assert x.device.type == "cuda" and y.device.type == "cuda"
        assert torch.equal(x.cpu(), base.shard(0, 1)[0])
        assert torch.equal(x1.cpu(), base.shard(1, 1)[0])


def test_negative_loader_workers_is_one_line_and_exit_2(folder, capsys, tmp_path):
    code = main(["run", "tests.toy_runner:convnet", "--input-shape", "1,6,6", "--workers",
                 "2", "--data", folder, "--loader-workers", "-1", "--quiet",
                 "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--loader-workers must be >= 0, got -1" in err[0]


def _one_process(folder) -> dict[str, torch.Tensor]:
    model = SPEC.build_model(seed=0)
    opt = SPEC.make_optimizer(model.parameters())
    shards = make_shards(SPEC, folder, 0, W, B)
    for step in range(STEPS):
        x, y = global_batch(shards, step)
        opt.zero_grad()
        SPEC.loss_fn()(logits_of(model(x)), y).backward()
        opt.step()
    return {n: p.detach() for n, p in model.named_parameters()}


@pytest.mark.dist
@pytest.mark.parametrize("architecture", ["ps", "allreduce"])
def test_image_folder_through_two_loaders_matches_one_process(architecture, folder, tmp_path):
    torch.set_num_threads(1)
    out = tmp_path / "params.pt"
    result = run_training(RunConfig(
        workload=SPEC, workers=W, architecture=architecture, batch_size=B, steps=STEPS,
        data=folder, loader_workers=2, threads=1, final_params_path=str(out), device="cpu"))
    found = torch.load(out, weights_only=True)
    expected = _one_process(folder)
    initial = {n: p.detach() for n, p in SPEC.build_model(seed=0).named_parameters()}
    for n in expected:
        assert not torch.equal(expected[n], initial[n]), f"{n} did not train"
        rel = (found[n] - expected[n]).abs().max() / expected[n].abs().max()
        assert rel <= 1e-5, f"{n}: relative difference {rel:.3g}"
    assert result["config"]["loader_workers"] == 2
    assert result["steps"]["data_s"]["n"] == W * (STEPS - 2)


@pytest.mark.dist
def test_resumed_run_reads_the_batches_the_interrupted_run_would_have(folder, tmp_path):
    torch.set_num_threads(1)
    base = dict(workload=SPEC, workers=W, architecture="allreduce", batch_size=B, data=folder,
                loader_workers=2, threads=1, device="cpu")
    whole = run_training(RunConfig(steps=STEPS, **base))
    ckpt = str(tmp_path / "ckpt")
    run_training(RunConfig(steps=3, checkpoint_dir=ckpt, checkpoint_every=3, **base))
    resumed = run_training(RunConfig(steps=STEPS, checkpoint_dir=ckpt, resume=True, **base))
    assert resumed["resumed_from_step"] == 3
    assert resumed["final_param_checksum"] == whole["final_param_checksum"]
