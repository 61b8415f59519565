"""One palette and one look for every figure (matplotlib, Agg backend)."""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# One palette for every figure, so a phase or an architecture has one colour throughout.
COLORS = {
    "compute": "#3b6fb6",
    "io": "#8e6bbf",
    "push": "#e0803a",
    "apply": "#d1495b",
    "pull": "#edae49",
    "comm": "#e0803a",
    "ps": "#3b6fb6",
    "allreduce": "#2a9d8f",
    "hierarchical": "#8e6bbf",
    "measured": "#d1495b",
    "budget": "#d1495b",
    "chosen": "#2a9d8f",
    "grid": "#e5e7eb",
    "text": "#374151",
}
PHASES = ("compute", "io", "push", "apply", "pull")


def style(ax) -> None:
    ax.grid(True, color=COLORS["grid"], linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#9ca3af")
    ax.tick_params(colors=COLORS["text"], labelsize=9)
    ax.xaxis.label.set_color(COLORS["text"])
    ax.yaxis.label.set_color(COLORS["text"])
    ax.title.set_color("#111827")


def legend_below(fig, axes, ncol: int = 4) -> None:
    """One legend for ``axes`` (their labelled artists), under the axes and outside them, so
    that it never covers data; ``png``'s tight bounding box keeps it in the picture."""
    handles, labels = [], []
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    if handles:
        fig.legend(handles, labels, fontsize=8, frameon=False, ncol=min(ncol, len(labels)),
                   loc="upper center", bbox_to_anchor=(0.5, 0.0))


def memory_budget_drawn(profile: dict) -> bool:
    """Whether the batch figure draws the memory budget: when it lies within 4x the largest
    peak memory measured (further up, the line would flatten the curve)."""
    mem = [r.get("peak_memory_bytes") or 0 for r in profile.get("batches", [])
           if r.get("batch_size")]
    budget = profile.get("memory_budget_bytes")
    return bool(mem and budget and budget < 4 * max(mem))


def png(fig, tight: bool = True) -> bytes:
    """The figure as PNG bytes (110 dpi, white); closes it."""
    buf = io.BytesIO()
    if tight:
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", facecolor="white")
    else:
        fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def median(value: Any) -> float | None:
    """A phase time in run.json is {median, ...} or a number."""
    if isinstance(value, dict):
        value = value.get("median")
    return float(value) if isinstance(value, (int, float)) else None
