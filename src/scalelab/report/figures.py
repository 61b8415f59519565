"""One function per figure. Each takes loaded result dicts and returns PNG bytes, or None
when the files hold nothing to draw. Fields missing from a file are skipped, not guessed."""

from __future__ import annotations

import io
from collections import defaultdict
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


def _style(ax) -> None:
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


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    return buf.getvalue()


def _median(value: Any) -> float | None:
    """A phase time in run.json is {median, ...} or a number."""
    if isinstance(value, dict):
        value = value.get("median")
    return float(value) if isinstance(value, (int, float)) else None


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
    if budget and budget < 4 * max(m or 0 for m in mem):
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
        ax.legend(fontsize=8, frameon=False, loc="upper left")
    fig.tight_layout()
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


def scaling(plans: list[dict], runs: list[dict], validations: list[dict]) -> bytes | None:
    """Speedup and efficiency against device count, per architecture and network, with the
    target efficiency and any measured points."""
    series: dict[str, list[dict]] = defaultdict(list)
    target = None
    for p in plans:
        inputs = p.get("inputs") or {}
        cluster = inputs.get("cluster") or {}
        net = inputs.get("cluster_name") or cluster.get("network") or \
            (f"{cluster['network_gbps']:g} Gb/s" if cluster.get("network_gbps") else "")
        target = target or inputs.get("target_efficiency") or \
            (inputs.get("options") or {}).get("target_efficiency")
        for row in p.get("sweep", []):
            if row.get("gpus") and row.get("speedup") is not None:
                label = row.get("architecture", "?") + (f" @ {net}" if net else "")
                series[label].append(row)
    if not series:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    linestyles = ["-", "--", ":", "-."]
    nets = sorted({k.split(" @ ")[-1] for k in series})
    for label, rows in sorted(series.items()):
        rows = sorted(rows, key=lambda r: r["gpus"])
        arch = label.split(" @ ")[0]
        ls = linestyles[nets.index(label.split(" @ ")[-1]) % len(linestyles)] if " @ " in label \
            else "-"
        g = [r["gpus"] for r in rows]
        ax1.plot(g, [r["speedup"] for r in rows], ls, color=COLORS.get(arch, "#6b7280"),
                 label=label)
        ax2.plot(g, [r.get("efficiency") for r in rows], ls, color=COLORS.get(arch, "#6b7280"),
                 label=label)
    allg = [r["gpus"] for rows in series.values() for r in rows]
    ax1.plot([1, max(allg)], [1, max(allg)], color="#d1d5db", linewidth=1, label="linear")
    measured = _measured_speedups(runs, validations)
    if measured:
        ax1.plot([m[0] for m in measured], [m[1] for m in measured], "o",
                 color=COLORS["measured"], label="measured")
    if target:
        ax2.axhline(target, color=COLORS["budget"], linestyle="--",
                    label=f"target efficiency {target:g}")
    for ax, name in ((ax1, "speedup"), (ax2, "efficiency")):
        ax.set_xlabel("devices")
        ax.set_ylabel(name)
        if max(allg) >= 16:
            ax.set_xscale("log", base=2)
        _style(ax)
    ax2.set_ylim(0, 1.05)
    ax1.set_title("Predicted speedup")
    ax2.set_title("Predicted efficiency")
    ax2.legend(fontsize=7, frameon=False, loc="lower left")
    fig.tight_layout()
    return _png(fig)


def _measured_speedups(runs: list[dict], validations: list[dict]) -> list[tuple[int, float]]:
    """(workers, measured speedup) from runs sharing a per-worker batch with a 1-worker run."""
    points: dict[tuple, dict[int, float]] = defaultdict(dict)
    for r in runs:
        cfg = r.get("config", {})
        sps = r.get("samples_per_s")
        if cfg.get("workers") and sps:
            points[(cfg.get("architecture"), cfg.get("batch_size"))][cfg["workers"]] = sps
    for v in validations:
        for c in v.get("cases", []):
            cfg = c.get("config", {})
            if cfg.get("workers") and c.get("measured_samples_per_s"):
                key = (cfg.get("architecture"), cfg.get("batch_size"), cfg.get("rate"))
                points[key][cfg["workers"]] = c["measured_samples_per_s"]
    out = []
    for by_w in points.values():
        if 1 in by_w:
            out += [(w, s / by_w[1]) for w, s in sorted(by_w.items())]
    return out


def _case_parts(case: dict, side: str) -> dict[str, float]:
    """A validation case's breakdown: ``side`` is "predicted" or "measured"."""
    parts = {}
    for phase in PHASES:
        v = case.get(f"{side}_{phase}_s")
        if isinstance(v, (int, float)):
            parts[phase] = float(v)
    comm = case.get(f"{side}_comm_s")
    if isinstance(comm, (int, float)) and not {"push", "pull"} & set(parts):
        parts["push"] = float(comm)  # exchange shown as one segment when not split
    return {k: v for k, v in parts.items() if v}


def breakdown(plans: list[dict], runs: list[dict],
              validations: list[dict] | None = None) -> bytes | None:
    """A step's time split into compute, I/O, push, apply and pull: predicted beside measured.

    Measured bars come from run.json medians; the predicted bar is the plan's sweep row with
    the same architecture and number of devices as the run (or the recommended row)."""
    bars: list[tuple[str, dict[str, float]]] = []
    for r in runs:
        cfg = r.get("config", {})
        steps = r.get("steps", {})
        parts = {
            "compute": _median(steps.get("compute_s")),
            "io": _median(steps.get("data_s")),
            "push": _median(steps.get("push_s")),
            "apply": _median(steps.get("apply_s")),
            "pull": _median(steps.get("pull_s")),
        }
        parts = {k: v for k, v in parts.items() if v}
        if not parts:
            continue
        arch = cfg.get("architecture", "run")
        w = cfg.get("workers", "?")
        pred = _predicted_row(plans, arch, w)
        if pred is not None:
            bars.append((f"{arch} W={w}\npredicted", pred))
        bars.append((f"{arch} W={w}\nmeasured", parts))
    for v in validations or []:
        for case in v.get("cases", [])[:8]:
            pred, meas = _case_parts(case, "predicted"), _case_parts(case, "measured")
            if pred and meas:
                cfg = case.get("config", {})
                label = " ".join(f"{k}={val}" for k, val in cfg.items()
                                 if k in ("architecture", "workers", "ps", "rate"))
                bars.append((f"{label}\npredicted", pred))
                bars.append((f"{label}\nmeasured", meas))
    if not bars and plans:
        rec = (plans[0].get("recommendation") or {})
        pred = _predicted_row(plans, rec.get("architecture"), rec.get("gpus"))
        if pred:
            bars.append((f"recommended G={rec.get('gpus')}\npredicted", pred))
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(10, 0.8 + 0.55 * len(bars)))
    labels = [b[0] for b in bars]
    left = [0.0] * len(bars)
    for phase in PHASES:
        vals = [b[1].get(phase, 0.0) * 1e3 for b in bars]
        if any(vals):
            ax.barh(labels, vals, left=left, color=COLORS[phase], label=phase)
            left = [a + v for a, v in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_xlabel("time per step (ms)")
    ax.legend(fontsize=8, frameon=False, ncol=5, loc="lower center",
              bbox_to_anchor=(0.5, 1.0))
    _style(ax)
    fig.tight_layout()
    return _png(fig)


def _predicted_row(plans: list[dict], arch, gpus) -> dict[str, float] | None:
    """The plan's prediction for ``arch`` on ``gpus`` devices; plans whose compute time was
    scaled to another device (estimates) are no prediction of a run here."""
    for p in plans:
        if p.get("estimate"):
            continue
        for row in p.get("sweep", []):
            if row.get("architecture") == arch and row.get("gpus") == gpus:
                parts = {"compute": row.get("compute_s") or 0.0, "io": row.get("io_s") or 0.0}
                if row.get("push_s") is not None or row.get("pull_s") is not None:
                    parts.update(push=row.get("push_s") or 0.0, apply=row.get("apply_s") or 0.0,
                                 pull=row.get("pull_s") or 0.0)
                else:
                    exposed = max(0.0, (row.get("step_s") or 0.0) - parts["compute"]
                                  - parts["io"])
                    parts["push"] = exposed
                return parts
    return None


def validation(validations: list[dict]) -> bytes | None:
    """Predicted against measured step time, with the y = x line and the errors."""
    cases = [c for v in validations for c in v.get("cases", [])
             if c.get("predicted_step_s") and c.get("measured_step_s")]
    if not cases:
        return None
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    pred = [c["predicted_step_s"] * 1e3 for c in cases]
    meas = [c["measured_step_s"] * 1e3 for c in cases]
    colors = [COLORS.get((c.get("config") or {}).get("architecture"), "#6b7280") for c in cases]
    ax.scatter(pred, meas, c=colors, s=36, zorder=3)
    hi = max(pred + meas) * 1.1
    lo = min(pred + meas) / 1.1
    ax.plot([lo, hi], [lo, hi], color="#9ca3af", linewidth=1, label="y = x")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="#e5e7eb",
                    alpha=0.6, label="±10%")
    if hi / lo > 20:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("predicted step time (ms)")
    ax.set_ylabel("measured step time (ms)")
    ax.set_title("Predicted against measured")
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    _style(ax)
    fig.tight_layout()
    return _png(fig)


def compare(compares: list[dict]) -> bytes | None:
    """Samples/s per ablation step, predicted beside measured."""
    steps = [s for c in compares for s in c.get("steps", [])]
    if not steps:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.8))
    x = list(range(len(steps)))
    w = 0.38
    ax.bar([i - w / 2 for i in x], [s.get("predicted_samples_per_s") or 0 for s in steps], w,
           color="#9ca3af", label="predicted")
    ax.bar([i + w / 2 for i in x], [s.get("measured_samples_per_s") or 0 for s in steps], w,
           color=COLORS["compute"], label="measured")
    for i, s in zip(x, steps):
        if s.get("speedup"):
            ax.text(i + w / 2, s.get("measured_samples_per_s") or 0, f"{s['speedup']:.2f}x",
                    ha="center", va="bottom", fontsize=8, color=COLORS["text"])
    ax.set_xticks(x, [s.get("name", "") for s in steps], rotation=15, fontsize=8)
    ax.set_ylabel("samples/s")
    ax.set_title("Naive against recommended, one recommendation at a time")
    ax.legend(fontsize=8, frameon=False)
    _style(ax)
    fig.tight_layout()
    return _png(fig)
