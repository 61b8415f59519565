"""One worker: all-reduce trains the plain module (no DDP), and it, a one-server parameter
server and one process end with the same parameters, bit for bit."""

import pytest
import torch

from scalelab.runner import RunConfig, run_training
from scalelab.runner.config import ALLREDUCE_EXCHANGE, ONE_WORKER_EXCHANGE
from scalelab.runner.data import make_shards
from scalelab.workload import WorkloadSpec, logits_of

SPEC = WorkloadSpec("tests.toy_runner:convnet", input_shape=(1, 6, 6), num_classes=3, lr=0.05)
B, STEPS = 4, 4


def one_process(spec: WorkloadSpec) -> dict[str, torch.Tensor]:
    model = spec.build_model(seed=0)
    opt = spec.make_optimizer(model.parameters())
    shards = make_shards(spec, None, 0, 1, B)
    for step in range(STEPS):
        x, y = shards.shard(step, 0)
        opt.zero_grad(set_to_none=True)
        spec.loss_fn()(logits_of(model(x)), y).backward()
        opt.step()
    return {n: p.detach() for n, p in model.named_parameters()}


def test_the_exchange_form_of_one_all_reduce_worker_says_there_is_none():
    assert RunConfig(workload=SPEC, workers=1, architecture="allreduce",
                     device="cpu").exchange_form == ONE_WORKER_EXCHANGE
    assert RunConfig(workload=SPEC, workers=2, architecture="allreduce",
                     device="cpu").exchange_form == ALLREDUCE_EXCHANGE


@pytest.mark.dist
def test_one_worker_all_reduce_equals_one_process_and_one_server_bit_for_bit(tmp_path):
    expected = one_process(SPEC)
    runs = {}
    for arch, kw in (("allreduce", {}), ("ps", {"ps": 1, "piece_bytes": 64})):
        out = tmp_path / f"{arch}.pt"
        runs[arch] = run_training(RunConfig(
            workload=SPEC, workers=1, architecture=arch, batch_size=B, steps=STEPS,
            threads=1, device="cpu", final_params_path=str(out), **kw))
        found = torch.load(out, weights_only=True)
        assert found.keys() == expected.keys()
        for n in expected:
            assert torch.equal(found[n], expected[n]), f"{arch}: {n} differs"
    ar = runs["allreduce"]
    assert ar["config"]["exchange_form"] == ONE_WORKER_EXCHANGE
    assert ar["bytes_per_step"]["worker"]["bytes_reduced"] == 0
    assert ar["final_param_checksum"] == runs["ps"]["final_param_checksum"]


@pytest.mark.dist
def test_one_worker_trains_the_plain_module_and_two_wrap_it_in_ddp(monkeypatch):
    from torch.nn.parallel import DistributedDataParallel

    from scalelab.runner import allreduce

    seen = []
    real = allreduce.DDPWorker.__init__

    def spy(self, *a, **kw):
        real(self, *a, **kw)
        seen.append(isinstance(self.ddp, DistributedDataParallel))

    import torch.distributed as dist

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    from scalelab.runner.launch import free_port

    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setattr(allreduce.DDPWorker, "__init__", spy)
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        for workers in (1, 2):
            cfg = RunConfig(workload=SPEC, workers=workers, architecture="allreduce",
                            device="cpu")
            allreduce.DDPWorker(cfg, 0, SPEC.build_model(seed=0), None, {})
    finally:
        dist.destroy_process_group()
    assert seen == [False, True]
