"""ZeRO / FSDP memory and exchange formulas, checked against the ZeRO paper's Table 1."""

import pytest

from scalelab.theory import zero
from scalelab.theory.comm import ring_allreduce_bytes
from scalelab.theory.memory import largest_batch

# Rajbhandari, Rasley, Ruwase, He, "ZeRO: Memory Optimizations Toward Training Trillion
# Parameter Models", SC 2020, arXiv:1910.02054, Table 1 (and Figure 1): per-device model
# state of a 7.5B-parameter model trained with mixed-precision Adam (K = 12) on Nd = 64
# GPUs: baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.88 GB (GB = 1e9 bytes).
TABLE_1_GB = {"ddp": 120.0, "zero1": 31.4, "zero2": 16.6, "zero3": 1.88}


@pytest.mark.parametrize("layout", zero.LAYOUTS)
def test_zero_paper_table_1_to_three_digits(layout):
    state = zero.model_state(7.5e9, 64, layout, param_bytes_per_param=2,
                             grad_bytes_per_param=2, optimizer_bytes_per_param=12)
    got_gb = state.total_bytes / 1e9
    assert float(f"{got_gb:.3g}") == TABLE_1_GB[layout]


def test_components_and_dtypes():
    s = zero.model_state(1000, 4, "zero2", param_bytes_per_param=4, grad_bytes_per_param=4,
                         optimizer_bytes_per_param=4)
    assert (s.param_bytes, s.grad_bytes, s.optimizer_bytes) == (4000, 1000, 1000)
    s1 = zero.model_state(1000, 4, "zero1", param_bytes_per_param=4, grad_bytes_per_param=4,
                          optimizer_bytes_per_param=4)
    assert (s1.param_bytes, s1.grad_bytes, s1.optimizer_bytes) == (4000, 4000, 1000)
    s3 = zero.model_state(1000, 4, "zero3")
    assert s3.total_bytes == 16 * 1000 / 4
    # one rank: every layout holds everything
    assert len({zero.model_state(1000, 1, lay).total_bytes for lay in zero.LAYOUTS}) == 1


def test_exchange_bytes_match_ring_all_reduce_and_one_and_a_half():
    psi, n = 1e6, 8
    ar = ring_allreduce_bytes(2 * psi, n)
    assert zero.exchange_bytes(psi, n, "ddp") == pytest.approx(ar)
    assert zero.exchange_bytes(psi, n, "zero1") == pytest.approx(ar)
    assert zero.exchange_bytes(psi, n, "zero2") == pytest.approx(ar)
    assert zero.exchange_bytes(psi, n, "zero3") == pytest.approx(1.5 * ar)
    assert zero.zero1_over_ddp_bytes(psi, n) == pytest.approx(1.5 * ar)
    assert zero.exchange_bytes(psi, 1, "zero3") == 0.0
    # fp32 gradients, bf16 parameters: reduce-scatter 4 psi, all-gather 2 psi
    assert zero.exchange_bytes(psi, n, "zero2", param_bytes_per_param=2,
                               grad_bytes_per_param=4) == pytest.approx(7 / 8 * 6 * psi)


def test_exchange_time_counts_latency_per_collective():
    t = zero.exchange_s(1e6, 4, "zero3", bandwidth_Bps=1e9, latency_s=1e-3, units=5)
    assert t == pytest.approx(zero.exchange_bytes(1e6, 4, "zero3") / 1e9 + 3 * 5 * 3 * 1e-3)
    assert zero.exchange_s(1e6, 1, "zero3", bandwidth_Bps=1e9) == 0.0


def test_dim0_shards_follow_torch_chunk():
    torch = pytest.importorskip("torch")
    for shape in [(10, 3), (3,), (1, 7), (0, 4), (64, 3, 3, 3), ()]:
        for n in (1, 2, 3, 4):
            t = torch.empty(shape) if shape else torch.empty(())
            chunks = torch.chunk(t.reshape(1) if not shape else t, n, dim=0)
            want = [c.numel() for c in chunks] + [0] * (n - len(chunks))
            got = [zero.dim0_shard_numel(shape, n, r) for r in range(n)]
            assert got == want, (shape, n)
    assert sum(zero.sharded_numel([(10, 3), (5,)], 3, r) for r in range(3)) == 35


def test_transient_and_largest_batch():
    assert zero.transient_bytes([100, 300, 200], 4, "ddp") == 0
    # zero3: two largest units gathered (500 params x 2 B) + largest unit's grad less shard
    assert zero.transient_bytes([100, 300, 200], 4, "zero3") == 2 * 500 + 2 * 300 * 3 / 4
    assert zero.transient_bytes([100, 300, 200], 4, "zero2") == 2 * 300 * 3 / 4
    # the largest batch is theory.memory's, with a layout's state as its fixed bytes
    assert largest_batch(1000, 400, 50, margin=1.0) == 12
    assert largest_batch(1000, 400, 0, margin=1.0) is None


def test_bad_input():
    with pytest.raises(ValueError, match="unknown layout"):
        zero.model_state(1, 1, "zero4")
    with pytest.raises(ValueError, match="ranks"):
        zero.model_state(1, 0, "ddp")


def test_rank_state_bytes_exact_and_even():
    shapes = [(16, 144), (16,), (3, 16), (3,)]
    total = 16 * 144 + 16 + 48 + 3
    s = [zero.rank_state_bytes(shapes, 2, r, "zero3") for r in range(2)]
    assert sum(x.param_bytes for x in s) == 4 * total
    assert s[0].param_bytes == 4 * (8 * 144 + 8 + 2 * 16 + 2)
    z1 = [zero.rank_state_bytes(shapes, 2, r, "zero1") for r in range(2)]
    assert [x.optimizer_bytes for x in z1] == [4 * 16 * 144, 4 * (16 + 48 + 3)]
    assert z1[1].param_bytes == z1[1].grad_bytes == 4 * total
    z2 = zero.rank_state_bytes(shapes, 2, 0, "zero2", between_steps=False)
    assert z2.param_bytes == 4 * total and z2.grad_bytes == s[0].grad_bytes


def test_fsdp_prefetch_overlap_limits():
    units = [1, 2, 1]
    # no exchange: forward + backward; no compute: the whole exchange in series
    assert zero.fsdp_step_s(units, 3.0, 6.0, 0.0, 0.0) == pytest.approx(9.0)
    assert zero.fsdp_step_s(units, 0.0, 0.0, 1.0, 2.0) == pytest.approx(1.0 + 1.0 + 2.0)
    assert zero.fsdp_step_s(units, 0.0, 0.0, 1.0, 2.0,
                            reshard_after_forward=False) == pytest.approx(3.0)
    # compute much longer than the exchange: only the first gather, the last unit's gather
    # again for backward (ZeRO-3) and the last reduce-scatter show
    t = zero.fsdp_step_s(units, 300.0, 600.0, 1.0, 2.0)
    assert t == pytest.approx(900.0 + 0.25 * 1.0 + 0.25 * 1.0 + 0.25 * 2.0)
    t2 = zero.fsdp_step_s(units, 300.0, 600.0, 1.0, 2.0, reshard_after_forward=False)
    assert t2 == pytest.approx(900.0 + 0.25 * 1.0 + 0.25 * 2.0)
    # in between: more than compute, less than compute + exchange
    mid = zero.fsdp_step_s(units, 3.0, 6.0, 2.0, 2.0)
    assert 9.0 < mid < 9.0 + 6.0


@pytest.mark.parametrize("n, a, r", [(24, 0.5, 0.5), (24, 1.5, 1.5), (80, 3.0, 3.0),
                                     (8, 0.1, 0.1), (24, 0.9, 1.2)])
def test_the_blocks_closed_form_is_the_simulations_steady_state(n, a, r):
    """forward 1 s, backward 2 s: the simulation exceeds the closed form by its ends only."""
    sim = zero.fsdp_step_s([1.0] * n, 1.0, 2.0, a, r) - 3.0
    closed = zero.fsdp_blocks_exposed_s(n, 1.0, 2.0, a, r)
    assert 0.0 <= sim - closed <= 3 * (a + r) / n
    # all hidden while each block's collectives are shorter than its compute
    assert zero.fsdp_blocks_exposed_s(n, 1.0, 2.0, 0.5, 0.5) == 0.0
    with pytest.raises(ValueError):
        zero.fsdp_blocks_exposed_s(0, 1.0, 2.0, a, r)
