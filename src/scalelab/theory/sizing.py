"""How many parameter servers and how much bandwidth a configuration needs.

Parameter-server lemma (Zou et al., 2017). Hide the push-then-pull exchange behind one
step's compute: with even shards the servers need ``2 S_p N_w / (N_ps B_ps) <= T_C``, so

    N_ps >= ceil(2 S_p N_w / (B_ps T_C)).

Worker condition. Each worker pushes and pulls S_p over its own link, so independently of
the servers ``2 S_p / B_w <= T_C``, i.e. ``B_w >= 2 S_p / T_C``: no number of servers fixes
a slow worker link.

Bandwidth for a target efficiency. Weak-scaling efficiency ``T_C / T`` with
``T = max(T_C + T_IO + (1 - o) T_comm, T_comm)`` (:func:`scalelab.theory.comm.overlapped_step_s`)
stays >= alpha while ``T_comm <= min((T_C/alpha - T_C - T_IO) / (1 - o), T_C/alpha)``;
the link that carries ``link_bytes`` per step then needs ``link_bytes / T_comm``.

Examples (bandwidth as nominal line rate, 1 Gb/s = 125e6 B/s): AlexNet's 244 MB, 8 workers,
T_C = 0.171 s need 183 servers on 1GbE, 19 on 10GbE, 4 on 56 Gb/s InfiniBand, and the
worker link needs 2*244e6/0.171 = 2.85e9 B/s (22.8 Gb/s): 1GbE and 10GbE fail.
"""

from __future__ import annotations

import math

from scalelab.theory.comm import ps_worker_bytes


def _ceil(x: float) -> int:
    # 4.0000000001 from rounding is 4, not 5.
    return math.ceil(x - 1e-9)


def ps_servers_needed(
    param_bytes: float, workers: int, ps_bandwidth_Bps: float, compute_s: float
) -> int:
    """The lemma: N_ps >= ceil(2 S_p N_w / (B_ps T_C)); at least 1."""
    if not ps_bandwidth_Bps > 0:
        raise ValueError(f"server bandwidth must be > 0, got {ps_bandwidth_Bps}")
    if not compute_s > 0:
        raise ValueError(f"compute time must be > 0, got {compute_s}")
    return max(1, _ceil(2.0 * param_bytes * workers / (ps_bandwidth_Bps * compute_s)))


def worker_bandwidth_needed_Bps(param_bytes: float, compute_s: float) -> float:
    """The worker condition's bound: B_w >= 2 S_p / T_C."""
    if not compute_s > 0:
        raise ValueError(f"compute time must be > 0, got {compute_s}")
    return ps_worker_bytes(param_bytes) / compute_s


def worker_link_ok(param_bytes: float, worker_bandwidth_Bps: float, compute_s: float) -> bool:
    """True when 2 S_p / B_w <= T_C (the worker's link can hide its exchange)."""
    return worker_bandwidth_Bps >= worker_bandwidth_needed_Bps(param_bytes, compute_s) * (1 - 1e-12)


def allowed_comm_s(
    compute_s: float, target_efficiency: float, overlap: float = 0.0, io_s: float = 0.0
) -> float:
    """Largest T_comm that keeps T_C / T >= alpha (0 when I/O alone breaks the target)."""
    if not 0 < target_efficiency <= 1:
        raise ValueError(f"target efficiency must be in (0, 1], got {target_efficiency}")
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be in [0, 1], got {overlap}")
    budget = compute_s / target_efficiency
    slack = budget - compute_s - io_s
    if slack < 0:
        return 0.0
    if overlap >= 1.0:
        return budget
    return min(slack / (1.0 - overlap), budget)


def bandwidth_needed_Bps(
    link_bytes: float,
    compute_s: float,
    target_efficiency: float,
    overlap: float = 0.0,
    io_s: float = 0.0,
) -> float:
    """Per-direction bandwidth for ``link_bytes`` per step within :func:`allowed_comm_s`.

    Infinite when no bandwidth reaches the target (target 1.0 without overlap, or I/O
    already too slow).
    """
    if link_bytes <= 0:
        return 0.0
    t = allowed_comm_s(compute_s, target_efficiency, overlap, io_s)
    return math.inf if t <= 0 else link_bytes / t


def worker_phase_s(param_bytes: float, worker_bandwidth_Bps: float) -> float:
    """A worker's own share of the exchange: push S_p then pull S_p over B_w, 2 S_p / B_w."""
    if not worker_bandwidth_Bps > 0:
        raise ValueError(f"worker bandwidth must be > 0, got {worker_bandwidth_Bps}")
    return ps_worker_bytes(param_bytes) / worker_bandwidth_Bps
