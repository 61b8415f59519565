import pytest

from scalelab.theory import comm

GBPS = 1e9 / 8  # bytes/s per Gb/s


def test_seed_example_180mb_over_1gbps():
    # a ~180 MB update over 1 Gb/s: push + pull on one link takes ~2.9 s
    t = comm.worker_link_s(180e6, 1 * GBPS)
    assert t == pytest.approx(2.88, abs=0.05)
    ex = comm.ps_exchange(180e6, 1, 1.0, 1 * GBPS, 10 * GBPS)
    assert ex.comm_s == pytest.approx(2.88, abs=0.05)
    assert ex.form == comm.PUSH_THEN_PULL


def test_half_and_full_duplex_forms_named_and_differ_by_two():
    s, n, p, b = 100e6, 8, 4, 1e9
    half = comm.ps_push_then_pull_s(s, n, p, b)
    assert half == pytest.approx(2 * s * n / (p * b))
    full = comm.ps_pipelined_s(s, n, p, b, worker_bandwidth_Bps=1e12)
    assert full == pytest.approx(half / 2)
    ex_half = comm.ps_exchange(s, n, 1 / p, 1e12, b)
    ex_full = comm.ps_exchange(s, n, 1 / p, 1e12, b, full_duplex=True)
    assert ex_half.comm_s == pytest.approx(half)
    assert ex_full.comm_s == pytest.approx(full)
    assert ex_half.form != ex_full.form


def test_worker_bound_holds_whatever_the_servers():
    s, bw = 244e6, 1 * GBPS
    for servers in (1, 10, 1000):
        ex = comm.ps_exchange(s, 8, 1 / servers, bw, 100 * GBPS)
        assert ex.comm_s >= comm.worker_link_s(s, bw) * (1 - 1e-12)


def test_uneven_shards_slow_the_server_side():
    even = comm.ps_exchange(1e8, 4, 0.25, 1e12, 1e9)
    skew = comm.ps_exchange(1e8, 4, 0.62, 1e12, 1e9)
    assert skew.comm_s / even.comm_s == pytest.approx(0.62 / 0.25)


def test_colocated_even_equals_ring_bytes():
    s, n, b = 1e8, 4, 1e9
    ex = comm.ps_exchange(s, n, 1 / n, b, b, colocated=True, smallest_fraction=1 / n)
    assert ex.comm_s == pytest.approx(2 * (n - 1) / n * s / b)
    assert comm.ps_exchange(s, 1, 1.0, b, b, colocated=True).comm_s == 0.0


def test_ring_equals_nccl_busbw_definition():
    s, b = 256e6, 12.5e9
    for n in (2, 3, 8, 64):
        t = comm.ring_allreduce_s(s, n, b)
        # nccl-tests: algbw = S / t, busbw = algbw * 2 (n-1)/n; a ring at link speed B
        # has busbw == B exactly
        assert comm.nccl_bus_bandwidth_Bps(s, n, t) == pytest.approx(b, rel=1e-12)
    assert comm.ring_allreduce_s(s, 1, b) == 0.0
    assert comm.ring_allreduce_s(s, 4, b, latency_s=1e-3) == pytest.approx(
        2 * 3 / 4 * s / b + 6e-3
    )


def test_hierarchical():
    h = comm.hierarchical_allreduce(1e8, 8, 4, 300e9, 12.5e9, latency_s=1e-4)
    assert h.intra_s == pytest.approx(2 * 7 / 8 * 1e8 / 300e9)
    assert h.inter_s == pytest.approx(2 * 3 / 4 * 1e8 / 12.5e9 + 6e-4)
    assert h.comm_s == pytest.approx(h.intra_s + h.inter_s)


def test_overlap():
    assert comm.overlapped_step_s(1.0, 0.5) == pytest.approx(1.5)
    assert comm.overlapped_step_s(1.0, 0.5, overlap=1.0) == pytest.approx(1.0)
    assert comm.overlapped_step_s(1.0, 3.0, overlap=1.0) == pytest.approx(3.0)
    assert comm.overlapped_step_s(1.0, 0.5, io_exposed_s=0.2, overlap=0.5) == pytest.approx(1.45)
    with pytest.raises(ValueError):
        comm.overlapped_step_s(1.0, 0.5, overlap=1.5)


def test_zero_bandwidth_rejected():
    with pytest.raises(ValueError):
        comm.ps_push_then_pull_s(1e6, 2, 1, 0.0)
    with pytest.raises(ValueError):
        comm.ring_allreduce_s(1e6, 2, -1.0)
    with pytest.raises(ValueError):
        comm.worker_link_s(1e6, 0.0)
