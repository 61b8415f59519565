"""theory.parallel: tensor, pipeline, data and context terms."""

from __future__ import annotations

import pytest

from scalelab.theory import parallel as par


def test_tp_layer_time_is_four_allreduces_and_sp_moves_the_same_bytes():
    b, s, h, t, bw = 1, 4096, 8192, 8, 400e9
    ar = 2 * (t - 1) / t * b * s * h * 2 / bw
    assert par.tp_layer_s(b, s, h, t, bw) == pytest.approx(4 * ar)
    assert par.tp_layer_s(b, s, h, t, bw, sequence_parallel=True) == pytest.approx(4 * ar)
    assert par.tp_layer_s(b, s, h, t, bw, recompute="full") == pytest.approx(6 * ar)
    assert par.tp_layer_s(b, s, h, 1, bw) == 0.0
    assert par.tp_link(8, 8) == "intra" and par.tp_link(16, 8) == "inter"


def test_bubble():
    assert par.bubble_fraction(4, 8) == pytest.approx(3 / 8)
    assert par.bubble_fraction(4, 8, "interleaved", 2) == pytest.approx(3 / 16)
    assert par.bubble_fraction(1, 8) == 0.0
    with pytest.raises(ValueError, match="schedule"):
        par.bubble_fraction(2, 2, "zb")


def test_p2p_and_in_flight():
    one = 2 * 2048 * 4096 * 2 / 100e9
    assert par.pp_p2p_s(2, 2048, 4096, 4, 8, 100e9) == pytest.approx(2 * 3 * one)
    assert par.pp_p2p_s(2, 2048, 4096, 1, 8, 100e9) == 0.0
    assert par.in_flight_micro_batches(4, 16) == 4
    assert par.in_flight_micro_batches(4, 16, "gpipe") == 16
    assert par.in_flight_micro_batches(4, 16, "interleaved", 2) == pytest.approx(
        4 * (1 + 3 / 8))


def test_dp_overlap_and_cp():
    assert par.dp_exposed_s(1.0, 0.4) == pytest.approx(0.6)
    assert par.dp_exposed_s(1.0, 2.0) == 0.0
    assert par.dp_exposed_s(1.0, 2.0, overlap=0.0) == 1.0
    assert par.cp_ring_s(1, 8192, 1024, 1, 1e9) == 0.0
    assert par.cp_ring_s(1, 8192, 1024, 4, 100e9) == pytest.approx(
        3 * 3 * (2 * 2048 * 1024 * 2) / 100e9)


def test_a_send_longer_than_a_stage_pass_sets_the_pace():
    # shorter than forward and backward: nothing beyond the first and last micro-batch's
    assert par.pp_link_bound_s(0.01, 0.02, 0.04, 8) == 0.0
    # 30 ms sends, 20 ms forward, 40 ms backward, 8 micro-batches: 7 x 10 ms forward
    assert par.pp_link_bound_s(0.03, 0.02, 0.04, 8) == pytest.approx(0.07)
    # longer than both, interleaved over 2 virtual stages (chunks of 10 and 20 ms)
    assert par.pp_link_bound_s(0.03, 0.02, 0.04, 4, vpp=2) == pytest.approx(7 * (0.02 + 0.01))
    assert par.pp_link_bound_s(0.0, 0.02, 0.04, 4) == 0.0
    with pytest.raises(ValueError):
        par.pp_link_bound_s(0.03, 0.02, 0.04, 0)


def test_a_rendezvous_pipeline_exposes_every_send():
    assert par.pp_p2p_rendezvous_s(0.01, 4) == pytest.approx(0.08)
    assert par.pp_p2p_rendezvous_s(-1e-4, 4) == 0.0     # a replay's noise below its gap
    with pytest.raises(ValueError):
        par.pp_p2p_rendezvous_s(0.01, 0)
