"""The language-model step model: its terms move the way their formulas say."""

from __future__ import annotations

import pytest

from scalelab.models.presets import preset
from scalelab.parallel import ParallelLayout
from scalelab.plan.lm import LMTarget, lm_step

H100x64 = LMTarget("H100-SXM", gpus_per_node=8, nodes=8, intra_node_Bps=450e9,
                   inter_node_Bps=50e9)


def test_data_parallel_only_has_no_tp_or_pp_terms():
    s = lm_step(preset("gpt2"), ParallelLayout(dp=8, micro_batch=8), 1024, H100x64)
    assert s.tp_comm_s == s.pp_bubble_s == s.pp_p2p_s == 0.0
    assert s.step_s >= s.compute_s > 0
    assert s.tokens_per_s == pytest.approx(8 * 8 * 1024 / s.step_s)
    assert 0 < s.mfu < 1 and s.hfu == pytest.approx(s.mfu)
    assert s.fits


def test_pipeline_bubble_shrinks_with_micro_batches_and_virtual_stages():
    cfg = preset("llama3-8b")
    few = lm_step(cfg, ParallelLayout(dp=8, pp=4, accumulation=4), 4096, H100x64)
    many = lm_step(cfg, ParallelLayout(dp=8, pp=4, accumulation=16), 4096, H100x64)
    inter = lm_step(cfg, ParallelLayout(dp=8, pp=4, accumulation=16, schedule="interleaved",
                                        vpp=2), 4096, H100x64)
    assert few.pp_bubble_s / few.compute_s > many.pp_bubble_s / many.compute_s
    assert inter.pp_bubble_s < many.pp_bubble_s
    assert few.pp_p2p_s > 0


def test_tensor_parallel_across_nodes_costs_more_than_inside():
    cfg = preset("llama3-70b")
    lay_in = ParallelLayout(dp=8, tp=8, micro_batch=1, accumulation=8, zero=1,
                            recompute="full")
    # the same tp 8 on nodes of four GPUs with one 100 Gb/s NIC each: its collectives
    # cross the network
    four = LMTarget("H100-SXM", gpus_per_node=4, nodes=16, intra_node_Bps=450e9,
                    inter_node_Bps=12.5e9)
    inside = lm_step(cfg, lay_in, 4096, H100x64)
    across = lm_step(cfg, lay_in, 4096, four)
    assert inside.tp_comm_s > 0
    assert across.tp_comm_s / across.compute_s > 2 * inside.tp_comm_s / inside.compute_s


def test_recomputation_trades_memory_for_time():
    cfg = preset("llama3-8b")
    base = dict(dp=8, micro_batch=2, accumulation=4, zero=3)
    none = lm_step(cfg, ParallelLayout(**base), 4096, H100x64)
    full = lm_step(cfg, ParallelLayout(**base, recompute="full"), 4096, H100x64)
    assert full.memory["activations"] < none.memory["activations"] / 4
    assert full.compute_s > none.compute_s
    assert full.hfu > full.mfu


def test_a_70b_model_on_one_gpu_does_not_fit():
    s = lm_step(preset("llama3-70b"), ParallelLayout(), 4096,
                LMTarget("H100-SXM", 1, 1, 450e9, 50e9))
    assert not s.fits and s.memory_bytes > 70e9 * 16


def test_bad_inputs_are_value_errors():
    with pytest.raises(ValueError, match="seq_len"):
        lm_step(preset("gpt2"), ParallelLayout(), 0, H100x64)
    with pytest.raises(ValueError, match="GPUs"):
        lm_step(preset("gpt2"), ParallelLayout(dp=128), 1024, H100x64)
    with pytest.raises(ValueError, match="stack"):
        lm_step(preset("gpt2"), ParallelLayout(), 1024, H100x64, stack="jax")


def test_fp8_runs_the_products_on_the_fp8_peak_and_needs_one():
    cfg = preset("llama3-8b")
    lay = dict(dp=8, micro_batch=2, accumulation=4, zero=3)
    bf16 = lm_step(cfg, ParallelLayout(**lay), 8192, H100x64)
    fp8 = lm_step(cfg, ParallelLayout(**lay, precision="fp8"), 8192, H100x64)
    assert fp8.compute_s < bf16.compute_s
    a100 = LMTarget("A100-SXM-80GB", 8, 8, 300e9, 25e9)
    with pytest.raises(ValueError, match="fp8"):
        lm_step(cfg, ParallelLayout(**lay, precision="fp8"), 8192, a100)


def test_a_tensor_degree_that_does_not_divide_the_heads_is_refused():
    with pytest.raises(ValueError, match="heads"):
        lm_step(preset("gpt2"), ParallelLayout(tp=5), 1024, H100x64)


def test_context_parallel_charges_its_kv_ring():
    cfg = preset("llama3-8b")
    one = lm_step(cfg, ParallelLayout(dp=8, zero=3), 32768, H100x64)
    two = lm_step(cfg, ParallelLayout(dp=4, cp=2, zero=3), 32768, H100x64)
    assert two.tp_comm_s > one.tp_comm_s == 0.0
    assert two.memory["activations"] < one.memory["activations"]


def test_a_pipeline_over_a_slow_link_is_paced_by_its_sends():
    """Sends shorter than a stage's compute: two exposed per boundary, the time linear in
    the link's; far slower: every micro-batch waits on the link (pp_link_bound_s)."""
    cfg = preset("gpt2")
    lay = ParallelLayout(pp=2, micro_batch=8, accumulation=8, precision="bf16")

    def p2p(bw):
        return lm_step(cfg, lay, 1024, LMTarget("H100-SXM", 1, 2, 450e9, bw)).pp_p2p_s

    fast = p2p(50e9)
    assert p2p(25e9) == pytest.approx(2 * fast, rel=0.02)     # two sends: linear in 1/B
    slow = p2p(1e8)
    assert slow > 4 * fast * 50e9 / 1e8                       # far past linear: paced
