"""The traffic a tensor- or pipeline-parallel case's prediction replays, and its figures
(scalelab.experiment.parallel_links; the runs on emulated links are
benchmarks/prediction_error.py --tp-pp)."""

import pytest

from scalelab.experiment.parallel_links import LinkCase, critical_traffic
from scalelab.theory.sharded_step import Collective
from tests.parallel_reference import GPT2, GPT2_UNTIED, config


def test_the_critical_path_traffic_is_the_step_models():

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
    case = LinkCase("tp 2", "100mbit", 0.10, 0.02, 0.05, 0.125)
    assert case.predicted_step_s == pytest.approx(0.13)
    assert case.error == pytest.approx(0.13 / 0.125 - 1)
