"""Pipeline parallelism (torch.distributed.pipelining): stages cut from the model by
deleting modules, schedules 1F1B and Interleaved 1F1B equal to one process (fp32 SGD)."""

import pytest

from scalelab.errors import UsageError
from scalelab.models.model import build
from scalelab.runner.pipeline_parallel import cut_stage, stage_blocks, stages_of_rank
from tests.parallel_reference import GPT2, GPT2_UNTIED, LLAMA, config, max_differences

TOL = 1e-5


def test_stages_split_the_blocks_contiguously_and_loop_over_ranks():
    assert stage_blocks(4, 2) == [range(0, 2), range(2, 4)]
    assert stage_blocks(5, 3) == [range(0, 2), range(2, 4), range(4, 5)]
    assert stages_of_rank(1, pp=2, vpp=2) == [1, 3]
    with pytest.raises(ValueError, match="5 pipeline stages cannot split 4 layers"):
        stage_blocks(4, 5)


def test_the_stages_partition_the_models_parameters():
    whole = dict(build(GPT2_UNTIED).named_parameters())
    seen = {}
    for s in range(4):
        stage = cut_stage(build(GPT2_UNTIED), s, 4)
        assert list(stage.blocks) == [str(s)]
        assert (stage.tok_emb is None) == (s > 0) and (stage.head is None) == (s < 3)
        for n, p in stage.named_parameters():
            assert n not in seen and p.shape == whole[n].shape
            seen[n] = p
    assert set(seen) == set(whole)


@pytest.mark.parametrize("layout,message", [
    (dict(pp=5, accumulation=5), "5 pipeline stages x 1 virtual stages = 5 is more than "
                                 "tiny's 4 layers"),
    (dict(pp=2, vpp=2, accumulation=4), "2 virtual stages need the interleaved schedule, "
                                        "not 1f1b"),
    (dict(pp=2, accumulation=1), "a 1f1b pipeline of 2 stages needs at least 2 micro-batches"),
    (dict(pp=2, schedule="interleaved", vpp=2, accumulation=3),
     "micro-batches per step \\(3\\) divisible by the pipeline degree 2"),
])
def test_bad_pipelines_are_one_line(layout, message):
    with pytest.raises((UsageError, ValueError), match=message):
        config(**layout)


def test_a_tied_head_is_refused_across_stages():
    with pytest.raises(UsageError, match="ties its head to its token embedding"):
        config(model=GPT2, pp=2, accumulation=2)


def _run(tmp_path, **layout):
    from scalelab.runner.parallel_run import run_parallel

    path = tmp_path / "params.pt"
    cfg = config(**layout).with_(final_params_path=str(path))
    result = run_parallel(cfg)
    return cfg, result, *max_differences(result, path, cfg)


@pytest.mark.dist
@pytest.mark.slow
def test_dp2_x_pp2_1f1b_equals_one_process(tmp_path):
    cfg, result, dl, dp = _run(tmp_path, model=GPT2_UNTIED, dp=2, pp=2, accumulation=2)
    print(f"dp2 x pp2 1f1b gpt2 (untied): max loss diff {dl:.3g}, max param diff {dp:.3g}")
    assert dl < TOL and dp < TOL
    split = result["split"]
    assert split["pp_bubble_s"] > 0 and split["compute_s"] > 0 and split["tp_comm_s"] == 0
    assert split["dp_exchange_s"] > 0  # the gradients' all-reduce over the dp ranks
    assert [p["stages"] for p in result["per_rank"]] == [[0], [0], [1], [1]]


@pytest.mark.dist
@pytest.mark.slow
def test_pp2_interleaved_with_two_virtual_stages_and_recomputation_equals_one_process(
        tmp_path):
    cfg, result, dl, dp = _run(tmp_path, model=LLAMA, pp=2, vpp=2, schedule="interleaved",
                               accumulation=4, recompute="full")
    print(f"pp2 interleaved vpp2 llama, full recomputation: max loss diff {dl:.3g}, "
          f"max param diff {dp:.3g}")
    assert dl < TOL and dp < TOL
    assert [p["stages"] for p in result["per_rank"]] == [[0, 2], [1, 3]]


@pytest.mark.dist
@pytest.mark.slow
def test_tp2_x_pp2_with_sequence_parallelism_equals_one_process(tmp_path):
    cfg, result, dl, dp = _run(tmp_path, model=LLAMA, tp=2, pp=2, sequence_parallel=True,
                               accumulation=2, recompute="selective")
    print(f"tp2 x pp2 1f1b +sp llama, selective recomputation: max loss diff {dl:.3g}, "
          f"max param diff {dp:.3g}")
    assert dl < TOL and dp < TOL
    assert result["split"]["tp_comm_s"] > 0 and result["split"]["pp_bubble_s"] > 0
