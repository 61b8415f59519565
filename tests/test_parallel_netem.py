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

