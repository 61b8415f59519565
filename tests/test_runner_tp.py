"""Tensor parallelism (DTensor) and FSDP2 x TP on a DeviceMesh: the mesh, the plan by module
name, bad layouts refused in one line, and runs equal to one process (fp32 SGD, Gloo)."""

import pytest
import torch

from scalelab.errors import UsageError
from scalelab.models.model import build
from scalelab.parallel import ParallelLayout
from scalelab.runner.mesh import DIMS, Coords, coords_of, rank_of, shape_of
from scalelab.runner.tensor_parallel import block_plan, check_tp
from tests.parallel_reference import GPT2, LLAMA, config, max_differences, one_process

TOL = 1e-5


def test_mesh_orders_pp_dp_cp_tp_with_tp_innermost():
    lay = ParallelLayout(dp=2, tp=2, pp=3, accumulation=3)
    assert DIMS == ("pp", "dp", "cp", "tp")
    assert shape_of(lay) == (3, 2, 1, 2)
    assert coords_of(lay, 0) == Coords(pp=0, dp=0, cp=0, tp=0)
    assert coords_of(lay, 1) == Coords(pp=0, dp=0, cp=0, tp=1)   # tp neighbours adjacent
    assert coords_of(lay, 2) == Coords(pp=0, dp=1, cp=0, tp=0)
    assert coords_of(lay, 4) == Coords(pp=1, dp=0, cp=0, tp=0)
    assert [rank_of(lay, coords_of(lay, r)) for r in range(12)] == list(range(12))
    with pytest.raises(ValueError, match="outside a mesh of 12"):
        coords_of(lay, 12)


@pytest.mark.parametrize("model", [LLAMA, GPT2])
@pytest.mark.parametrize("sp", [False, True])
def test_the_plan_names_modules_the_block_has(model, sp):
    block = build(model).blocks["0"]
    names = {n for n, _ in block.named_modules()}
    plan = block_plan(model, sp, first=True, last=False)
    assert set(plan) - {""} <= names
    row = {"wo", "w2", "proj"}
    for name, style in plan.items():
        kind = type(style).__name__
        leaf = name.rsplit(".", 1)[-1]
        if leaf in {"wq", "wk", "wv", "w1", "w3", "fc"}:
            assert kind == "ColwiseParallel", name
        elif leaf in row:
            assert kind == "RowwiseParallel", name
    assert ("attn_norm" in plan) == sp and ("mlp_norm" in plan) == sp
    assert ("" in plan) == sp  # a stage's first block takes the whole sequence


def test_tensor_degree_must_divide_heads_kv_heads_and_mlp():
    check_tp(LLAMA, 2)
    with pytest.raises(ValueError, match="does not divide tiny's 4 attention heads and 2 "
                                         "key/value heads"):
        check_tp(LLAMA, 4)
    with pytest.raises(UsageError, match="tensor degree 4 does not divide"):
        config(tp=4)
    with pytest.raises(UsageError, match="context parallelism does not run on the CPU"):
        config(cp=2)
    with pytest.raises(UsageError, match="sequence parallelism splits the 15 tokens"):
        config(tp=2, sequence_parallel=True).with_(seq_len=15)


@pytest.fixture(scope="module")
def tp2_run(tmp_path_factory):
    """tp 2 with sequence parallelism, 4 steps: the uninterrupted run (resume compares)."""
    from scalelab.runner.parallel_run import run_parallel

    path = tmp_path_factory.mktemp("tp2") / "params.pt"
    cfg = config(tp=2, sequence_parallel=True, micro_batch=2, accumulation=2,
                 steps=4).with_(final_params_path=str(path))
    return cfg, run_parallel(cfg), path


@pytest.mark.dist
@pytest.mark.slow
def test_tp2_with_sequence_parallelism_equals_one_process(tp2_run):
    cfg, result, path = tp2_run
    dl, dp = max_differences(result, path, cfg)
    print(f"tp2+sp llama: max loss diff {dl:.3g}, max param diff {dp:.3g}")
    assert dl < TOL and dp < TOL
    split = result["split"]
    assert split["tp_comm_s"] > 0 and split["compute_s"] > 0
    assert split["pp_bubble_s"] == 0 and split["dp_exchange_s"] == 0
    ref = torch.load(path, weights_only=True)
    expected = sum(float(p.double().pow(2).sum()) for p in ref.values())
    assert result["final_param_checksum"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.dist
@pytest.mark.slow
def test_resume_from_a_dcp_checkpoint_is_bit_exact(tp2_run, tmp_path):
    from scalelab.runner.parallel_run import run_parallel

    cfg, whole, whole_path = tp2_run
    ckpt, path = tmp_path / "ckpt", tmp_path / "params.pt"
    first = cfg.with_(steps=2, checkpoint_dir=str(ckpt), checkpoint_every=2,
                      final_params_path=None)
    run_parallel(first)
    resumed = run_parallel(cfg.with_(checkpoint_dir=str(ckpt), resume=True,
                                     final_params_path=str(path)))
    assert resumed["resumed_from_step"] == 2
    assert resumed["losses"] == whole["losses"][2:]
    got, want = torch.load(path, weights_only=True), torch.load(whole_path, weights_only=True)
    assert all(torch.equal(got[n], want[n]) for n in want)
    assert resumed["final_param_checksum"] == whole["final_param_checksum"]
    # DCP reshards: the tp 2 checkpoint resumes as a 2-stage pipeline of the same batch
    other = cfg.with_(layout=ParallelLayout(pp=2, micro_batch=2, accumulation=2,
                                            precision="fp32"),
                      checkpoint_dir=str(ckpt), resume=True, final_params_path=str(path))
    repiped = run_parallel(other)
    assert repiped["resumed_from_step"] == 2
    assert max(abs(a - b) for a, b in zip(repiped["losses"], whole["losses"][2:],
                                         strict=True)) < TOL
    got = torch.load(path, weights_only=True)
    assert max(float((got[n] - want[n]).abs().max()) for n in want) < TOL
    with pytest.raises(UsageError, match="the checkpoint is of another run"):
        run_parallel(cfg.with_(checkpoint_dir=str(ckpt), resume=True, lr=0.2))


@pytest.mark.dist
@pytest.mark.slow
def test_fsdp_over_dp_times_tp_on_2x2_equals_one_process(tmp_path):
    from scalelab.runner.parallel_run import run_parallel

    path = tmp_path / "params.pt"
    cfg = config(model=GPT2, dp=2, tp=2, fsdp=True, zero=3).with_(
        final_params_path=str(path))
    result = run_parallel(cfg)
    dl, dp = max_differences(result, path, cfg)
    print(f"fsdp x tp 2x2 gpt2 (tied): max loss diff {dl:.3g}, max param diff {dp:.3g}")
    assert dl < TOL and dp < TOL
    assert result["split"]["dp_exchange_s"] is None  # inside FSDP2's forward/backward
    assert {r["tp"] for r in (p["coords"] for p in result["per_rank"])} == {0, 1}


@pytest.mark.parametrize("argv,message", [
    (["--tp", "3", "--workers", "3"], "tensor degree 3 does not divide"),
    (["--pp", "8", "--workers", "8", "--schedule", "gpipe"],
     "8 pipeline stages x 1 virtual stages = 8 is more than"),
    (["--tp", "2", "--pp", "2", "--workers", "6"],
     "tp 2 x pp 2 x cp 1 = 4 ranks per data-parallel replica "
     "does not divide --workers 6"),
    (["--pp", "2", "--vpp", "2", "--schedule", "gpipe", "--workers", "2"],
     "2 virtual stages need the interleaved schedule, not gpipe"),
    (["--pp", "2", "--workers", "2"], "a 1f1b pipeline of 2 stages needs at least 2 "
                                      "micro-batches per step, got 1 (--accumulation-steps"),
    (["--cp", "2", "--workers", "2"], "--cp 2: context parallelism does not run on the CPU"),
    (["--tp", "2", "--workers", "2", "--ps", "1"], "--ps is not taken by a tensor or pipeline"),
    (["--tp", "2", "--workers", "2", "--emulate-network", "fast"], "not a rate: 'fast'"),
    (["--tp", "2", "--workers", "2", "--precision", "fp16"], "--precision fp16: fp16 needs loss "
                                                            "scaling"),
    (["--tp", "2", "--workers", "4", "--architecture", "fsdp", "--zero", "1"],
     "--zero 1 (optimizer state sharded alone) is not built"),
])
def test_bad_layouts_on_the_command_line_are_one_line_exit_2(argv, message, tmp_path, capsys):
    import json

    from scalelab.cli import main

    (tmp_path / "config.json").write_text(json.dumps(_HF_TINY))
    code = main(["run", f"hf:{tmp_path}", "--seq-len", "16", "--device", "cpu", "--quiet",
                 *argv, "--out", str(tmp_path / "run.json")])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "run.json").exists()


_HF_TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 128, "max_position_embeddings": 64}


@pytest.mark.dist
@pytest.mark.slow
def test_the_run_command_trains_tp2_and_writes_the_split(tmp_path):
    import json

    from scalelab.cli import main

    (tmp_path / "config.json").write_text(json.dumps(_HF_TINY))
    out = tmp_path / "run.json"
    code = main(["run", f"hf:{tmp_path}", "--seq-len", "16", "--workers", "2", "--tp", "2",
                 "--batch-size", "2", "--steps", "3", "--warmup-steps", "1", "--lr", "0.1",
                 "--precision", "bf16", "--device", "cpu", "--quiet", "--out", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "scalelab.run/1"
    assert data["config"]["tp"] == 2 and data["config"]["sequence_parallel"] is True
    assert data["config"]["layout"]["precision"] == "bf16"
    # bf16 autocast: near the fp32 losses of one process (not equal)
    ref, _ = one_process(config(micro_batch=2, steps=3))
    assert max(abs(a - b) for a, b in zip(data["losses"], ref, strict=True)) < 0.05
    assert data["losses"] != ref
    assert set(data["split"]) >= {"compute_s", "tp_comm_s", "pp_bubble_s", "dp_exchange_s"}
    assert len(data["losses"]) == 3 and data["final_param_checksum"] > 0


@pytest.mark.dist
@pytest.mark.slow
def test_a_one_rank_mesh_trains_as_one_process(tmp_path):
    """Every degree 1 (one GPU, or one CPU process): the same code path, the same numbers."""
    from scalelab.runner.parallel_run import run_parallel

    path = tmp_path / "params.pt"
    cfg = config(micro_batch=2, accumulation=2).with_(final_params_path=str(path))
    result = run_parallel(cfg)
    dl, dp = max_differences(result, path, cfg)
    assert dl < TOL and dp < TOL
    assert result["world_size"] == 1 and result["split"]["tp_comm_s"] == 0
