"""theory.lm: the counts and memory terms against their papers' own figures."""

from __future__ import annotations

import pytest

from scalelab.theory import lm


def test_flops_per_token_is_6n_plus_12lhs():
    assert lm.flops_per_token(1e9, 10, 1000, 2000) == 6e9 + 12 * 10 * 1000 * 2000


def test_megatron_count_matches_the_per_token_count_with_recompute():
    # f = 4h, tied head counted: 96 B s L h^2 (1 + s/6h + V/16Lh) = 4 passes x forward
    B, s, L, h, V = 8, 2048, 24, 2048, 51200
    per_iter = lm.megatron_flops_per_iteration(B, s, L, h, V, recompute=True)
    layers = 24 * B * s * L * h * h + 4 * B * s * s * L * h
    head = 2 * B * s * h * V                 # not recomputed: 3 passes
    assert per_iter == pytest.approx(4 * layers + 3 * head)
    assert lm.megatron_flops_per_iteration(B, s, L, h, V, False) == pytest.approx(
        3 * layers + 3 * head)


def test_hfu_adds_what_recomputation_runs_again():
    n, L, h, s = 7e9, 32, 4096, 4096
    model = lm.flops_per_token(n, L, h, s)
    assert lm.hfu_flops_per_token(n, L, h, s, "none") == model
    assert lm.hfu_flops_per_token(n, L, h, s, "full") == pytest.approx(model * 4 / 3)
    assert lm.hfu_flops_per_token(n, L, h, s, "selective") == model + 4 * L * h * s


def test_korthikanti_terms():
    s, b, h, a = 2048, 1, 12288, 96          # GPT-3 175B's layer (their Table 2)
    sbh = s * b * h
    assert lm.korthikanti_bytes_per_layer(s, b, h, a) == pytest.approx(
        sbh * (34 + 5 * a * s / h))
    t = 8
    assert lm.korthikanti_bytes_per_layer(s, b, h, a, tp=t) == pytest.approx(
        sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert lm.korthikanti_bytes_per_layer(s, b, h, a, t, True) == pytest.approx(
        sbh / t * (34 + 5 * a * s / h))
    assert lm.korthikanti_bytes_per_layer(s, b, h, a, t, True, "selective") == \
        pytest.approx(34 * sbh / t)
    assert lm.korthikanti_bytes_per_layer(s, b, h, a, t, True, "full") == 2 * sbh / t
    flash = lm.korthikanti_bytes_per_layer(s, b, h, a, flash=True)
    assert flash == pytest.approx(34 * sbh + 4 * a * s * b)


def test_state_bytes_and_cost():
    assert sum(lm.state_bytes_per_param("torch-amp").values()) == 16
    assert sum(lm.state_bytes_per_param("megatron").values()) == 18
    with pytest.raises(ValueError, match="scheme"):
        lm.state_bytes_per_param("int4")
    assert lm.train_seconds(2e12, 1e6) == 2e6
    assert lm.train_cost(1e6, 1000, 8, 2.0) == pytest.approx(8 * 1000 / 3600 * 2.0)


def test_bad_inputs():
    with pytest.raises(ValueError):
        lm.flops_per_token(0, 1, 1, 1)
    with pytest.raises(ValueError, match="recompute"):
        lm.hfu_flops_per_token(1, 1, 1, 1, "some")


def test_term_by_term_count_is_korthikantis_in_its_setting():
    for s, b, h, a in ((2048, 2, 4096, 32), (1024, 1, 1024, 16)):
        assert lm.layer_activation_bytes(s, b, h, a) == pytest.approx(
            lm.korthikanti_bytes_per_layer(s, b, h, a))
        # flash drops the s^2 term and keeps the row statistics, as the closed form says
        assert lm.layer_activation_bytes(s, b, h, a, flash=True) == pytest.approx(
            lm.korthikanti_bytes_per_layer(s, b, h, a, flash=True))
