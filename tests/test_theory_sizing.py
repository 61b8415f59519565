import math

import pytest

from scalelab import hardware
from scalelab.theory import sizing

# The lemma's known answers use the nominal line rate (1 Gb/s = 125e6 B/s) and decimal
# megabytes (244 MB = 244e6 B): that convention reproduces 183 / 19 / 4 exactly.
S_P = 244e6
N_W = 8
T_C = 0.171


@pytest.mark.parametrize("name,expected", [("1GbE", 183), ("10GbE", 19), ("IB-FDR", 4)])
def test_ps_lemma_known_answers(name, expected):
    bps = hardware.network(name).nominal_Bps
    assert sizing.ps_servers_needed(S_P, N_W, bps, T_C) == expected


def test_ps_lemma_payload_rate_differs_and_is_documented():
    # with the TCP payload rate of 1GbE (0.949 Gb/s) the lemma asks for more servers
    n = sizing.ps_servers_needed(S_P, N_W, hardware.network("1GbE").payload_Bps, T_C)
    assert n > 183


@pytest.mark.parametrize("name,ok", [("1GbE", False), ("10GbE", False), ("IB-FDR", True)])
def test_worker_condition(name, ok):
    bps = hardware.network(name).nominal_Bps
    assert sizing.worker_link_ok(S_P, bps, T_C) is ok


def test_worker_bandwidth_needed():
    need = sizing.worker_bandwidth_needed_Bps(S_P, T_C)
    assert need == pytest.approx(2 * S_P / T_C)
    assert need * 8 / 1e9 == pytest.approx(22.83, abs=0.01)


def test_bandwidth_needed_for_efficiency():
    # T_C = 0.3 s, target 0.8: comm may take 0.075 s, so 2*180 MB needs 4.8 GB/s
    b = sizing.bandwidth_needed_Bps(2 * 180e6, 0.3, 0.8)
    assert b == pytest.approx(4.8e9)
    assert sizing.allowed_comm_s(0.3, 0.8, overlap=0.5) == pytest.approx(0.15)
    assert sizing.bandwidth_needed_Bps(1e6, 0.3, 1.0) == math.inf
    assert sizing.bandwidth_needed_Bps(1e6, 0.3, 0.8, io_s=1.0) == math.inf
    with pytest.raises(ValueError):
        sizing.allowed_comm_s(0.3, 0.0)
    with pytest.raises(ValueError):
        sizing.allowed_comm_s(0.3, 1.01)


def test_bad_inputs():
    with pytest.raises(ValueError):
        sizing.ps_servers_needed(S_P, N_W, 0.0, T_C)
    with pytest.raises(ValueError):
        sizing.ps_servers_needed(S_P, N_W, 1e9, 0.0)
