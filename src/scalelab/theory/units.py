"""Units and small integer helpers shared by every formula.

Link rates are quoted in bits per second by vendors and people (``100GbE``, ``--network-gbps
25``) and computed in bytes per second everywhere inside scalelab, so there is exactly one
place that converts: 1 Gb/s = 1e9 bits/s = 1e9/8 bytes/s (decimal prefixes, as network
vendors use them; memory sizes use binary prefixes only where a name says ``GiB``).
"""

from __future__ import annotations

BITS_PER_BYTE = 8
GIGA = 1e9


def gbps_to_Bps(gbps: float) -> float:
    """Gigabits per second -> bytes per second: x * 1e9 / 8 (10 Gb/s = 1.25e9 B/s)."""
    return gbps * GIGA / BITS_PER_BYTE


def Bps_to_gbps(bandwidth_Bps: float) -> float:
    """Bytes per second -> gigabits per second: x * 8 / 1e9 (1.25e9 B/s = 10 Gb/s)."""
    return bandwidth_Bps * BITS_PER_BYTE / GIGA


def Bps_to_mbps(bandwidth_Bps: float) -> float:
    """Bytes per second -> megabits per second: x * 8 / 1e6."""
    return bandwidth_Bps * BITS_PER_BYTE / 1e6


def bps_to_Bps(bits_per_s: float) -> float:
    """Bits per second -> bytes per second: x / 8."""
    return bits_per_s / BITS_PER_BYTE


def ceil_div(a: int, b: int) -> int:
    """Ceiling of a / b for non-negative integers a and positive b, without floats."""
    if b <= 0:
        raise ValueError(f"divisor must be > 0, got {b}")
    return -(-a // b)
