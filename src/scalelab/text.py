"""Numbers for a reader: seconds, bytes and link rates in the units people quote.

No e-notation ever reaches a sentence: rates are Gb/s with three significant digits
(``38.4 Gb/s``, ``2,590 Gb/s``), times pick s, ms or us, sizes MB or bytes.
"""

from __future__ import annotations

import math

from scalelab.theory.units import Bps_to_gbps


def format_s(t: float) -> str:
    """Seconds for a reader: 2.35 s, 171.0 ms, 352 us."""
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 1e-3 or t == 0:
        return f"{t * 1e3:.1f} ms"
    return f"{t * 1e6:.3g} us"


def format_bytes(n: float) -> str:
    """Bytes for a reader: 102.2 MB, 4,096 B."""
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n:,.0f} B"


def sig3(x: float) -> str:
    """Three significant digits without e-notation: 0.0123, 1.23, 38.4, 2,590, 70,700."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    digits = 3 - int(math.floor(math.log10(abs(x)))) - 1
    rounded = round(x, digits)
    if digits <= 0:
        return f"{rounded:,.0f}"
    return f"{rounded:,.{digits}f}"


def format_gbps(gbps: float) -> str:
    """A link rate given in Gb/s: ``38.4 Gb/s``, ``2,590 Gb/s``."""
    return f"{sig3(gbps)} Gb/s"


def format_Bps(bandwidth_Bps: float) -> str:
    """A rate in bytes/s shown as Gb/s: 1.25e9 B/s -> ``10.0 Gb/s``."""
    return format_gbps(Bps_to_gbps(bandwidth_Bps))


def plural(n: int, word: str) -> str:
    """``1 device``, ``8 devices``."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _node_range(first: int, last: int) -> str:
    return f"node {first}" if first == last else f"nodes {first}-{last}"


def server_hosts(per_node: tuple[int, ...]) -> str:
    """Where colocated servers run, from their count on each node: ``one on every node``,
    ``one each on nodes 0-5, none on nodes 6-7``, ``2 each on nodes 0-3, 1 each on 4-7``."""
    if len(set(per_node)) == 1:
        c = per_node[0]
        return ("one on the node" if len(per_node) == 1 and c == 1 else
                f"{c} on the node" if len(per_node) == 1 else
                "one on every node" if c == 1 else f"{c} on every node")
    parts, start = [], 0
    for j in range(1, len(per_node) + 1):
        if j == len(per_node) or per_node[j] != per_node[start]:
            c = per_node[start]
            word = "none on" if c == 0 else ("one each on" if c == 1 else f"{c} each on")
            if c and start == j - 1:
                word = "one on" if c == 1 else f"{c} on"
            parts.append(f"{word} {_node_range(start, j - 1)}")
            start = j
    return ", ".join(parts)
