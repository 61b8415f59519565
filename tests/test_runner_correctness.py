"""The runner trains correctly: same parameters as one process on the union of the shards.

Synchronous parameter servers (both partitions) and DDP with W workers at batch b must end
with the parameters of one process training at batch W*b on the same samples, within 1e-5
relative. The models have no batch normalization (its per-batch statistics would make the
two differ by construction). Asynchronous servers must converge to a known optimum.
"""

import pytest
import torch

from scalelab.runner import RunConfig, run_training
from scalelab.runner.data import global_batch, make_shards
from scalelab.workload import WorkloadSpec, logits_of

pytestmark = pytest.mark.dist

W, B, STEPS = 2, 4, 5


def single_process(spec: WorkloadSpec, seed: int = 0) -> dict[str, torch.Tensor]:
    model = spec.build_model(seed=seed)
    opt = spec.make_optimizer(model.parameters())
    shards = make_shards(spec, None, seed, W, B)
    for step in range(STEPS):
        x, y = global_batch(shards, step)
        opt.zero_grad()
        spec.loss_fn()(logits_of(model(x)), y).backward()
        opt.step()
    return {n: p.detach() for n, p in model.named_parameters()}


def assert_close(found: dict, expected: dict, initial: dict) -> None:
    assert found.keys() == expected.keys()
    for n in expected:
        assert not torch.equal(expected[n], initial[n]), f"{n} did not train"
        rel = (found[n] - expected[n]).abs().max() / expected[n].abs().max()
        assert rel <= 1e-5, f"{n}: relative difference {rel:.3g}"


CASES = {
    "ps-balanced-pieces": dict(architecture="ps", ps=2, partition="balanced", piece_bytes=256),
    "ps-tensor-adam": dict(architecture="ps", ps=2, partition="tensor", optimizer="adam"),
    "ddp": dict(architecture="allreduce"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sync_matches_one_process_at_w_times_b(case, tmp_path):
    kw = dict(CASES[case])
    optimizer = kw.pop("optimizer", "sgd")
    model = "tests.toy_runner:convnet" if case == "ps-balanced-pieces" else "tests.toy_runner:wide"
    shape = (1, 6, 6) if "convnet" in model else (6,)
    spec = WorkloadSpec(model, input_shape=shape, num_classes=3, optimizer=optimizer, lr=0.05)
    out = tmp_path / "params.pt"
    result = run_training(RunConfig(workload=spec, workers=W, batch_size=B, steps=STEPS,
                                    final_params_path=str(out), device="cpu", **kw))
    found = torch.load(out, weights_only=True)
    initial = {n: p.detach() for n, p in spec.build_model(seed=0).named_parameters()}
    expected = single_process(spec)
    assert_close(found, expected, initial)
    checksum = sum(float(p.double().pow(2).sum()) for p in found.values())
    assert result["final_param_checksum"] == pytest.approx(checksum, rel=1e-12)
    assert result["steps"]["step_s"]["n"] == W * (STEPS - 2)
    assert all(0 < r["cpu_s"] for r in result["per_rank"])
    if kw["architecture"] == "ps":
        assert result["bytes_per_step"]["worker"]["bytes_sent"] == result["param_bytes"]
        assert result["achieved_bandwidth_Bps"] > 0


def test_async_converges_to_the_known_optimum():
    """Labels independent of N(0, I) inputs: the optimum gives every class the same logit.

    Softmax ignores what all classes share, so the known solution is the weight and bias
    with their class mean removed equal to zero: softmax(logits) = 1/C for every input.
    """
    spec = WorkloadSpec("tests.toy_runner:far_linear", input_shape=(6,), num_classes=3,
                        lr=0.05)
    start = spec.build_model(seed=0)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = f"{d}/params.pt"
        result = run_training(RunConfig(workload=spec, workers=2, ps=2, mode="async",
                                        batch_size=256, steps=80, final_params_path=out,
                                        device="cpu"))
        found = torch.load(out, weights_only=True)
    def centered(w):
        return (w - w.mean(0, keepdim=True)).norm()

    w0 = centered(start.weight.detach())
    p0 = torch.softmax(start.bias.detach(), 0)
    p = torch.softmax(found["bias"], 0)
    print(f"centered weight norm {w0:.3f} -> {centered(found['weight']):.3f}; softmax(bias) "
          f"{p0.tolist()} -> {p.tolist()}; staleness {result['staleness']}")
    assert centered(found["weight"]) < 0.1 * w0
    assert (p - 1 / 3).abs().max() < 0.05 < (p0 - 1 / 3).abs().max()
    assert result["staleness"]["max"] >= 0
    servers = [r for r in result["per_rank"] if r["role"] == "server"]
    assert sum(r["updates"] for r in servers) == 2 * 2 * 80
