"""Figures of the profile stage: batch scaling and computation configurations."""

from __future__ import annotations

from scalelab.report.figures._style import COLORS, legend_below, memory_budget_drawn, plt
from scalelab.report.figures._style import png as _png
from scalelab.report.figures._style import style as _style


def batch_scaling(profile: dict) -> bytes | None:
    """Step time and peak memory against batch size, with the budget and the chosen batch."""
    rows = [r for r in profile.get("batches", []) if r.get("batch_size")]
    if not rows:
        return None
    rows.sort(key=lambda r: r["batch_size"])
    b = [r["batch_size"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    step = [r.get("step_s") for r in rows]
    ax1.plot(b, [s * 1e3 if s else None for s in step], "o-", color=COLORS["compute"],
             label="step time")
    fit = (profile.get("fit") or {}).get("step_s") or {}
    if "intercept" in fit and "per_sample" in fit:
        xs = [min(b), max(b)]
        ax1.plot(xs, [(fit["intercept"] + fit["per_sample"] * x) * 1e3 for x in xs], "--",
                 color="#9ca3af", label="linear fit")
    ax1.set_xlabel("batch size (samples)")
    ax1.set_ylabel("step time (ms)")
    ax1.set_title("Step time")
    sps = [r.get("samples_per_s") for r in rows]
    ax1b = None
    if any(sps):
        ax1b = ax1.twinx()
        ax1b.plot(b, sps, "s:", color=COLORS["allreduce"], label="samples/s", alpha=0.8)
        ax1b.set_ylabel("samples/s", color=COLORS["allreduce"])
        ax1b.tick_params(labelsize=9, colors=COLORS["allreduce"])
        ax1b.spines["top"].set_visible(False)
    mem = [r.get("peak_memory_bytes") for r in rows]
    ax2.plot(b, [m / 2**20 if m else None for m in mem], "o-", color=COLORS["apply"],
             label="peak memory")
    budget = profile.get("memory_budget_bytes")
    if memory_budget_drawn(profile):
        ax2.axhline(budget / 2**20, color=COLORS["budget"], linestyle="--",
                    label="memory budget")
    ax2.set_xlabel("batch size (samples)")
    ax2.set_ylabel("peak memory (MiB)")
    ax2.set_title("Memory")
    chosen = profile.get("recommended_batch_size")
    for ax in (ax1, ax2):
        if chosen:
            ax.axvline(chosen, color=COLORS["chosen"], linestyle=":", linewidth=2,
                       label=f"chosen batch {chosen}")
        if len(b) > 2 and max(b) / max(min(b), 1) >= 8:
            ax.set_xscale("log", base=2)
        _style(ax)
    fig.tight_layout()
    legend_below(fig, [ax1, *([ax1b] if ax1b is not None else []), ax2], ncol=6)
    return _png(fig)


def algorithms(profile: dict) -> bytes | None:
    """Step time per computation configuration; those that do not fit are hatched."""
    cands = [c for c in (profile.get("algorithms") or {}).get("candidates", [])
             if c.get("step_s")]
    if not cands:
        return None
    chosen = (profile.get("algorithms") or {}).get("chosen")
    cands.sort(key=lambda c: c["step_s"])
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.45 * len(cands)))
    names = [c["name"] for c in cands]
    colors = [COLORS["chosen"] if c["name"] == chosen else COLORS["compute"] for c in cands]
    bars = ax.barh(names, [c["step_s"] * 1e3 for c in cands], color=colors)
    for bar, c in zip(bars, cands):
        if c.get("fits") is False:
            bar.set_hatch("//")
            bar.set_alpha(0.5)
        label = f"{c['step_s'] * 1e3:.1f} ms" + ("  (does not fit)" if c.get("fits") is False
                                                 else "  chosen" if c["name"] == chosen else "")
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, "  " + label,
                va="center", fontsize=8, color=COLORS["text"])
    ax.invert_yaxis()
    ax.set_xlabel("step time (ms)")
    ax.set_title("Computation configurations at the chosen batch")
    _style(ax)
    ax.set_xlim(0, max(c["step_s"] for c in cands) * 1e3 * 1.35)
    fig.tight_layout()
    return _png(fig)
