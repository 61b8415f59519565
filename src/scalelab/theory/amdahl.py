"""Amdahl's law for data parallelism (Zou et al., 2017, section 3).

Strong scaling (fixed global batch, split over G devices): one device's step is
``T_C + T_O`` with ``T_C`` parallelizable and ``T_O`` not, and the overhead ratio
``R_O = T_O / T_C``. Normalizing one device's work to ``1 + R_O`` and splitting only the
compute part, G devices take ``1/G + R_O``, so

    S(G) = (1 + R_O) / (1/G + R_O) = G (1 + R_O) / (1 + G R_O)
    alpha(G) = S(G) / G = (1 + R_O) / (1 + G R_O)
    S_max = lim S(G) = 1 + 1/R_O            (G -> infinity)

Weak scaling (fixed per-device batch ``b``, what data-parallel training usually does): each
device computes its own ``T_C``, the exchange adds ``T_O(G)``:

    T(G) = T_C + T_O(G),  throughput(G) = G b / T(G),  efficiency(G) = T_C / T(G).

Assumes ``R_O`` does not depend on G in the strong-scaling form (the paper's
simplification); the weak-scaling form takes ``T_O(G)`` from :mod:`comm`.
"""

from __future__ import annotations

import math


def _check_ratio(overhead_ratio: float) -> None:
    if not overhead_ratio >= 0:
        raise ValueError(f"overhead ratio R_O must be >= 0, got {overhead_ratio}")


def _check_gpus(gpus: float) -> None:
    if not gpus >= 1:
        raise ValueError(f"gpus must be >= 1, got {gpus}")


def strong_speedup(overhead_ratio: float, gpus: float) -> float:
    """S(G) = G (1 + R_O) / (1 + G R_O)."""
    _check_ratio(overhead_ratio)
    _check_gpus(gpus)
    return gpus * (1.0 + overhead_ratio) / (1.0 + gpus * overhead_ratio)


def strong_efficiency(overhead_ratio: float, gpus: float) -> float:
    """alpha(G) = (1 + R_O) / (1 + G R_O); alpha(R_O=0.1, G=8) = 1.1/1.8 = 0.6111."""
    _check_ratio(overhead_ratio)
    _check_gpus(gpus)
    return (1.0 + overhead_ratio) / (1.0 + gpus * overhead_ratio)


def max_speedup(overhead_ratio: float) -> float:
    """S_max = 1 + 1/R_O (infinite when there is no overhead); S_max(0.25) = 5."""
    _check_ratio(overhead_ratio)
    return math.inf if overhead_ratio == 0 else 1.0 + 1.0 / overhead_ratio


def gpus_for_speedup(overhead_ratio: float, target_speedup: float) -> int | None:
    """Fewest devices with S(G) >= target, or None when the target is >= S_max.

    From G (1 + R_O) >= S (1 + G R_O): G (1 + R_O - S R_O) >= S, so
    G >= S / (1 + R_O - S R_O) when the bracket is positive (S < S_max).
    """
    _check_ratio(overhead_ratio)
    if not target_speedup >= 1:
        raise ValueError(f"target speedup must be >= 1, got {target_speedup}")
    denom = 1.0 + overhead_ratio - target_speedup * overhead_ratio
    if denom <= 0:
        return None
    return max(1, math.ceil(target_speedup / denom - 1e-9))


def max_gpus_for_efficiency(overhead_ratio: float, target_efficiency: float) -> int | None:
    """Most devices with alpha(G) >= target; None when unbounded (R_O = 0).

    From (1 + R_O) >= alpha (1 + G R_O): G <= (1 + R_O - alpha) / (alpha R_O).
    """
    _check_ratio(overhead_ratio)
    if not 0 < target_efficiency <= 1:
        raise ValueError(f"target efficiency must be in (0, 1], got {target_efficiency}")
    if overhead_ratio == 0:
        return None
    g = (1.0 + overhead_ratio - target_efficiency) / (target_efficiency * overhead_ratio)
    return max(1, math.floor(g + 1e-9))


def weak_step_s(compute_s: float, overhead_s: float) -> float:
    """T(G) = T_C + T_O(G)."""
    return compute_s + overhead_s


def weak_efficiency(compute_s: float, step_s: float) -> float:
    """efficiency(G) = T_C / T(G)."""
    if step_s <= 0:
        raise ValueError(f"step time must be > 0, got {step_s}")
    return compute_s / step_s


def weak_throughput(gpus: int, batch_size: int, step_s: float) -> float:
    """Samples per second of G devices at per-device batch b: G b / T(G)."""
    if step_s <= 0:
        raise ValueError(f"step time must be > 0, got {step_s}")
    return gpus * batch_size / step_s
