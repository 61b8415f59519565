import pytest

from scalelab.profiler.search import find_max_batch, linear_fit, recommend_batch


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
