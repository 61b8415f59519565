"""Device memory: the linear fit of peak memory against batch size, and the safety margin.

Peak memory of a training step grows with the batch (samples and activations) on top of
a fixed part (parameters, gradients, optimizer state, workspaces):

    M(b) = M_0 + m b                         (least squares over the measured batches)

A batch is taken to fit when ``M(b) <= margin x M_device``. The margin (0.9) leaves room
for the allocator's fragmentation and the framework's context, which a per-batch
measurement of peak allocated bytes does not see. Solving for b:

    b_max = floor((margin x M_device - M_0) / m)      (m > 0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MEMORY_MARGIN = 0.9


def usable_bytes(memory_bytes: float, margin: float = MEMORY_MARGIN) -> float:
    """The part of a device's memory a batch may use: margin x M_device."""
    if not 0 < margin <= 1:
        raise ValueError(f"memory margin must be in (0, 1], got {margin}")
    return margin * memory_bytes


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys against xs.

    No point gives (0, 0); one point, or points all at one x, give the line through the
    origin (0, y/x): a single batch's cost taken as proportional to the batch.
    """
    if len(xs) != len(ys):
        raise ValueError(f"need as many x as y values, got {len(xs)} and {len(ys)}")
    n = len(xs)
    if n == 0:
        return 0.0, 0.0
    if n == 1 or len(set(xs)) == 1:
        return 0.0, ys[0] / xs[0] if xs[0] else 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def largest_batch(memory_bytes: float, intercept_bytes: float, per_sample_bytes: float,
                  margin: float = MEMORY_MARGIN) -> int | None:
    """b_max = floor((margin M - M_0) / m); None when memory does not grow with b."""
    if not per_sample_bytes > 0:
        return None
    return math.floor((usable_bytes(memory_bytes, margin) - intercept_bytes) / per_sample_bytes)


RECOMPUTE_FORWARD_SHARE = 1 / 3
"""Forward's share of forward + backward when nothing better is known: backward computes
two products per forward product (the gradients of the inputs and of the weights), so
forward is 1/3 of the FLOPs (Kaplan et al. 2020, "Scaling laws", C = 6N per token of which
2N forward)."""


def recompute_compute_s(compute_s: float, forward_share: float | None = None) -> float:
    """Step compute with every block recomputed: one more forward, ``T (1 + f)`` with f the
    forward's share of the step (:data:`RECOMPUTE_FORWARD_SHARE` by default). An upper
    bound: the layers outside the blocks (a stem, a head) are not run twice."""
    f = RECOMPUTE_FORWARD_SHARE if forward_share is None else forward_share
    if not 0 <= f <= 1:
        raise ValueError(f"forward share must be in [0, 1], got {f}")
    return compute_s * (1 + f)
