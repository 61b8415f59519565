import math

import pytest

from scalelab.theory import amdahl


def test_alpha_known_answer():
    # Zou et al.: R_O = 0.1, G = 8 -> alpha = 1.1 / 1.8
    assert amdahl.strong_efficiency(0.1, 8) == pytest.approx(0.6111, abs=5e-5)
    assert amdahl.strong_speedup(0.1, 8) == pytest.approx(8 * 0.6111, abs=5e-4)


def test_smax_known_answer():
    assert amdahl.max_speedup(0.25) == pytest.approx(5.0, rel=1e-12)
    assert amdahl.max_speedup(0.0) == math.inf
    # the speedup approaches S_max from below
    assert amdahl.strong_speedup(0.25, 10**6) < 5.0
    assert amdahl.strong_speedup(0.25, 10**6) == pytest.approx(5.0, rel=1e-4)


def test_gpus_for_speedup_inverts_speedup():
    g = amdahl.gpus_for_speedup(0.1, 4.0)
    assert amdahl.strong_speedup(0.1, g) >= 4.0
    assert amdahl.strong_speedup(0.1, g - 1) < 4.0
    assert amdahl.gpus_for_speedup(0.25, 5.0) is None  # S_max is unreachable
    assert amdahl.gpus_for_speedup(0.0, 7.0) == 7


def test_max_gpus_for_efficiency():
    g = amdahl.max_gpus_for_efficiency(0.1, 0.6111)
    assert g == 8
    assert amdahl.strong_efficiency(0.1, g) >= 0.6111
    assert amdahl.strong_efficiency(0.1, g + 1) < 0.6111
    assert amdahl.max_gpus_for_efficiency(0.0, 0.8) is None
    with pytest.raises(ValueError):
        amdahl.max_gpus_for_efficiency(0.1, 0.0)
    with pytest.raises(ValueError):
        amdahl.max_gpus_for_efficiency(0.1, 1.5)


def test_weak_scaling():
    t = amdahl.weak_step_s(0.2, 0.05)
    assert t == pytest.approx(0.25)
    assert amdahl.weak_efficiency(0.2, t) == pytest.approx(0.8)
    assert amdahl.weak_throughput(8, 32, t) == pytest.approx(8 * 32 / 0.25)


def test_bad_inputs():
    with pytest.raises(ValueError):
        amdahl.strong_efficiency(-0.1, 8)
    with pytest.raises(ValueError):
        amdahl.strong_speedup(0.1, 0)
    with pytest.raises(ValueError):
        amdahl.weak_efficiency(0.1, 0.0)
