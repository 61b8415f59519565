"""The exchange's CPU cost and the floor it sets on one host (benchmarks/ps_exchange.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import p2p_bandwidth  # noqa: E402
import ps_exchange  # noqa: E402


def test_floor_spreads_the_cpu_work_over_the_cores_and_takes_the_compute_off():
    # 40 ms of exchange and 10 ms of one worker's forward+backward on 2 cores: a step of at
    # least 25 ms, so at least 15 ms of exchange once the 10 ms of compute is taken off
    assert ps_exchange.cpu_floor_s(0.040, 1, 0.010, 2) == pytest.approx(0.015)
    # two workers' compute runs side by side on the two cores
    assert ps_exchange.cpu_floor_s(0.040, 2, 0.010, 2) == pytest.approx(0.020)
    # more cores than work: nothing is left to show
    assert ps_exchange.cpu_floor_s(0.004, 1, 0.010, 16) == 0.0


@pytest.mark.dist
def test_exchange_cost_counts_every_rank_cpu():
    plain = p2p_bandwidth.exchange_cost(1, 1, 4 * 2**20, 2**20, repeats=3)
    assert plain["time_s"] > 0
    # both ranks copy 4 MiB each way through loopback TCP: each spends CPU on it
    assert len(plain["cpu_per_rank_s"]) == 2 and min(plain["cpu_per_rank_s"]) > 0
    spec = ps_exchange.WorkloadSpec("ps_exchange:big_linear",
                                    input_shape=(ps_exchange.IN_FEATURES,), num_classes=1)
    with_apply = p2p_bandwidth.exchange_cost(1, 1, 4 * 2**20, 2**20, repeats=3, spec=spec)
    assert with_apply["time_s"] > 0 and min(with_apply["cpu_per_rank_s"]) > 0
