"""Tensor- and pipeline-parallel runs on an emulated network: each rank a host of its own
behind a shaped link, the same numbers as one process, and nothing left behind."""

import os

import pytest

from scalelab.errors import UsageError
from scalelab.runner.parallel_run import run_parallel
from tests.parallel_reference import GPT2, GPT2_UNTIED, config, max_differences
from tests.test_netem import left_by

pytestmark = [pytest.mark.netem, pytest.mark.dist]


@pytest.mark.parametrize("model, layout", [(GPT2, {"tp": 2}),
                                           (GPT2_UNTIED, {"pp": 2, "accumulation": 2})])
def test_a_parallel_run_on_shaped_links_equals_one_process(tmp_path, model, layout):
    cfg = config(model, **layout).with_(emulate_network="200mbit",
                                        final_params_path=str(tmp_path / "p.pt"))
    result = run_parallel(cfg)
    assert result["network"] == {"rate_bps": 200_000_000, "hosts": 2}
    dl, dp = max_differences(result, tmp_path / "p.pt", cfg)
    assert dl <= 1e-5 and dp <= 1e-5, (dl, dp)
    assert left_by(os.getpid()) == []


def test_a_bad_rate_or_torchrun_is_one_line_before_any_rank_starts():
    with pytest.raises(UsageError, match="not a rate"):
        config(GPT2, tp=2).with_(emulate_network="fast")
    with pytest.raises(UsageError, match="needs the local launcher"):
        run_parallel(config(GPT2, tp=2).with_(emulate_network="200mbit"), launcher="torchrun")


def test_the_critical_path_traffic_is_the_step_models():
    from scalelab.experiment.parallel_links import LinkCase, critical_traffic, pipeline_exposed_s
    from scalelab.theory.sharded_step import Collective

    cfg = config(GPT2, tp=2, micro_batch=2, accumulation=3)       # 4 layers, seq 16, h 64
    traffic, ranks = critical_traffic(cfg)
    assert ranks == 2 and len(traffic) == 4 * 4 * 3                # 4 per layer, micro-batch
    assert {(c.kind, c.numel) for c in traffic} == {("all_reduce", 2 * 16 * 64)}
    sp, _ = critical_traffic(config(GPT2, tp=2, sequence_parallel=True))
    assert [c.kind for c in sp[:2]] == ["all_gather", "reduce_scatter"]
    # 4 pairs per layer, the stage's output and input gradient, 2 norms' weight and bias
    assert len(sp) == 4 * 4 * 2 + 2 + 2 * 2 * 4 and sp[-1] == Collective("all_reduce", 64)
    pp, ranks = critical_traffic(config(GPT2_UNTIED, pp=2, accumulation=4))
    assert ranks == 2 and [(c.kind, c.src) for c in pp] == [("send", 0), ("send", 1)]
    with pytest.raises(ValueError, match="one of tp or pp"):
        critical_traffic(config(GPT2_UNTIED, tp=2, pp=2, accumulation=2))
    assert pipeline_exposed_s(0.01, 4) == pytest.approx(0.08)   # 4 micro-batches, each way
    case = LinkCase("tp 2", "100mbit", 0.10, 0.02, 0.05, 0.125)
    assert case.predicted_step_s == pytest.approx(0.13)
    assert case.error == pytest.approx(0.13 / 0.125 - 1)
