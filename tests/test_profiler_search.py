import pytest

from scalelab.profiler.search import (
    Probe,
    find_max_batch,
    linear_fit,
    memory_guess,
    recommend_batch,
)


def fake_memory(per_sample=10.0, fixed=100.0, budget=1000.0):
    calls = []

    def fits(b):
        calls.append(b)
        return fixed + per_sample * b <= budget

    return fits, calls


def test_doubling_then_bisection_finds_the_exact_limit():
    fits, calls = fake_memory()  # limit: 100 + 10 b <= 1000 -> b = 90
    r = find_max_batch(fits, cap=1024, max_trials=20)
    assert r.max_fit == 90 and r.first_fail == 91
    assert calls[:8] == [1, 2, 4, 8, 16, 32, 64, 128]  # doubling brackets 64..128
    assert len(calls) == 8 + 6 and calls == list(r.tried)  # log2(64) = 6 bisection steps


def test_bounded_trials_return_largest_known_fit():
    fits, calls = fake_memory(per_sample=1.0, fixed=0.0, budget=1000.0)
    r = find_max_batch(fits, cap=4096, max_trials=5)
    assert len(calls) == 5 and r.max_fit == 16 and r.first_fail is None


def test_cap_and_nothing_fits():
    fits, _ = fake_memory(per_sample=0.0)
    assert find_max_batch(fits, cap=48).max_fit == 48
    fits, _ = fake_memory(fixed=5000.0)
    r = find_max_batch(fits)
    assert r.max_fit is None and r.tried == (1,)


def test_recommend_smallest_within_five_percent():
    assert recommend_batch({8: 90.0, 16: 96.0, 32: 100.0, 64: 99.0}) == 16
    assert recommend_batch({8: 90.0, 16: 94.0, 32: 100.0}) == 32
    with pytest.raises(ValueError):
        recommend_batch({})


def test_linear_fit_recovers_line():
    fit = linear_fit([1, 2, 4, 8], [0.5 + 0.25 * b for b in (1, 2, 4, 8)])
    assert fit["intercept"] == pytest.approx(0.5) and fit["per_sample"] == pytest.approx(0.25)


# A fake 141 GB device (the H200's memory): budget = 90% of it, as the profiler's default.
H200_BYTES = 141 * 10**9
BUDGET = int(0.9 * H200_BYTES)


def linear_memory(fixed=2 * 10**9, per_sample=105 * 10**6):
    return lambda b: fixed + per_sample * b


def lumpy_memory(b):
    """Allocator rounding (20 MiB segments) and a workspace that steps up past batch 512."""
    raw = 1.7e9 + 98e6 * b + (3e9 if b > 512 else 0.0)
    seg = 20 * 2**20
    return int(-(-raw // seg) * seg)


def largest_fit(memory, budget=BUDGET, cap=100_000):
    return max(b for b in range(1, cap) if memory(b) <= budget)


def probe_of(memory, budget=BUDGET, calls=None):
    def probe(b):
        if calls is not None:
            calls.append(b)
        m = memory(b)
        return Probe(m <= budget, m if m <= budget else None)  # a failure has no peak
    return probe


@pytest.mark.parametrize("memory", [linear_memory(), linear_memory(3 * 10**8, 7 * 10**6),
                                    lumpy_memory])
def test_141_gb_device_reaches_its_largest_batch_within_the_budget(memory):
    want = largest_fit(memory)
    calls = []
    r = find_max_batch(probe_of(memory, calls=calls), cap=65536, max_trials=16,
                       budget_bytes=BUDGET)
    assert r.max_fit == want and r.first_fail == want + 1
    assert len(calls) <= 16


def test_the_cap_ends_the_search_in_one_jump():
    calls = []
    r = find_max_batch(probe_of(linear_memory(3 * 10**8, 7 * 10**6), calls=calls), cap=4096,
                       budget_bytes=BUDGET)
    assert r.max_fit == 4096 and r.first_fail is None and calls == [1, 2, 4096]


def test_doubling_alone_would_not_reach_it():
    """The old search (doubling, then bisection with what trials remain) misses it."""
    memory = linear_memory()
    r = find_max_batch(lambda b: memory(b) <= BUDGET, cap=16384, max_trials=12, reserve=0)
    assert r.max_fit != largest_fit(memory)


def test_timed_ladder_then_jump_with_trials_held_back():
    memory = linear_memory()
    calls = []
    rungs = iter([True] * 20)
    r = find_max_batch(probe_of(memory, calls=calls), cap=16384, max_trials=16,
                       budget_bytes=BUDGET, reserve=6, keep_doubling=lambda: next(rungs))
    # The caller wanted every rung, but the last 6 trials were kept for the jump.
    assert calls[:10] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert r.max_fit == largest_fit(memory) and len(calls) <= 16


def test_a_batch_that_does_not_train_is_passed_over():
    def probe(b):
        if b == 1:
            return Probe(False, None, trains=False)  # BatchNorm: one value per channel
        return Probe(b <= 40, 100 + b if b <= 40 else None)
    r = find_max_batch(probe, cap=1024)
    assert r.untrainable == (1,) and r.tried[:2] == (1, 2)
    assert r.max_fit == 40 and r.first_fail == 41


def test_nothing_trains():
    r = find_max_batch(lambda b: Probe(False, None, trains=False), cap=8, max_trials=10)
    assert r.max_fit is None and r.first_fail is None and r.untrainable == (1, 2, 4, 8)


def test_memory_guess():
    assert memory_guess({1: 110, 2: 120, 4: 140}, 1000) == 4 + (1000 - 140) // 10
    assert memory_guess({4: 140}, 1000) is None
    assert memory_guess({2: 140, 4: 140}, 1000) is None  # no growth: no line to follow
    assert memory_guess({2: 120, 4: 140}, None) is None
