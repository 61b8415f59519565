"""Input pipeline: how much loading time shows, and how many loader processes hide it.

Model: each of ``L`` loader processes prepares whole minibatches, one at a time, taking
``t_load`` seconds each, while the device computes a step of ``T_C`` seconds. In steady
state the loaders together deliver one minibatch every ``t_load / L`` seconds; the device
consumes one every ``T_C``. Whatever the loaders are slower than the device shows as
waiting time per step (the paper's "mask I/O with compute"). Assumes enough prefetch depth
that bursts even out, and that loaders do not slow the compute (separate cores).
"""

from __future__ import annotations

import math


def exposed_io_s(load_s_per_batch: float, loader_workers: int, compute_s: float) -> float:
    """Input time per step not hidden behind compute: ``max(0, t_load / L - T_C)``.

    With ``L = 0`` the main process loads each batch before computing it, so nothing is
    hidden and the whole ``t_load`` shows.
    """
    if load_s_per_batch < 0 or compute_s < 0 or loader_workers < 0:
        raise ValueError(
            f"need load_s_per_batch >= 0, compute_s >= 0, loader_workers >= 0; got "
            f"{load_s_per_batch}, {compute_s}, {loader_workers}"
        )
    if loader_workers == 0:
        return float(load_s_per_batch)
    return max(0.0, load_s_per_batch / loader_workers - compute_s)


def loader_workers_needed(load_s_per_batch: float, compute_s: float) -> int:
    """Fewest loader processes that hide loading: ``ceil(t_load / T_C)``.

    From ``t_load / L <= T_C``. Zero loading time needs no loader process; otherwise at
    least one (so loading runs beside compute, not before it).
    """
    if load_s_per_batch < 0 or compute_s <= 0:
        raise ValueError(
            f"need load_s_per_batch >= 0 and compute_s > 0; got {load_s_per_batch}, {compute_s}"
        )
    if load_s_per_batch == 0:
        return 0
    return max(1, math.ceil(load_s_per_batch / compute_s - 1e-9))
