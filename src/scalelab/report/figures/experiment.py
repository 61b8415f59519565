"""Figures of the experiment stage: step breakdowns, predicted against measured, compare."""

from __future__ import annotations

from scalelab.report.figures._style import COLORS, PHASES, legend_below, plt
from scalelab.report.figures._style import median as _median
from scalelab.report.figures._style import png as _png
from scalelab.report.figures._style import style as _style
from scalelab.report.figures.plan import predicted_row


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
        pred = predicted_row(plans, arch, w)
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
        pred = predicted_row(plans, rec.get("architecture"), rec.get("gpus"))
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
    _style(ax)
    fig.tight_layout()
    legend_below(fig, [ax], ncol=2)
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
    _style(ax)
    fig.tight_layout()
    legend_below(fig, [ax], ncol=2)
    return _png(fig)


def _speedup_series(validation: dict) -> dict[tuple, list[tuple[int, float, float]]]:
    """(workers, predicted, measured speedup) per series.

    Speedup is samples/s over those of one worker alone on one thread (its whole step,
    update included): a fixed unit of this machine, whatever threads a case's workers get.
    """
    from scalelab.theory.amdahl import weak_throughput

    series: dict[tuple, list] = {}
    for c in validation["cases"]:
        cfg = c["config"]
        t1 = c.get("one_worker_step_s")
        if not t1:
            continue
        key = (c.get("model", ""), cfg["architecture"], cfg.get("ps"), cfg.get("partition"),
               cfg["batch_size"], cfg.get("rate"))
        w, b = cfg["workers"], cfg["batch_size"]
        one = weak_throughput(1, b, t1)
        series.setdefault(key, []).append(
            (w, weak_throughput(w, b, c["predicted_step_s"]) / one,
             weak_throughput(w, b, c["measured_step_s"]) / one))
    return {k: sorted(v) for k, v in series.items()}


def _predicted_vs_measured(ax, validation: dict) -> None:
    import matplotlib.ticker

    cases = validation["cases"]
    for arch in ("ps", "allreduce"):
        sel = [c for c in cases if c["config"]["architecture"] == arch]
        if sel:
            ax.scatter([c["predicted_step_s"] * 1e3 for c in sel],
                       [c["measured_step_s"] * 1e3 for c in sel], s=36, zorder=3,
                       color=COLORS[arch], label=f"{arch} (uncalibrated)")
        cal = [c for c in sel if c.get("calibrated_step_s")]
        if cal:
            ax.scatter([c["calibrated_step_s"] * 1e3 for c in cal],
                       [c["measured_step_s"] * 1e3 for c in cal], s=36, zorder=3,
                       facecolors="none", edgecolors=COLORS[arch],
                       label=f"{arch} (calibrated)")
    vals = ([c["predicted_step_s"] * 1e3 for c in cases]
            + [c["measured_step_s"] * 1e3 for c in cases]
            + [c["calibrated_step_s"] * 1e3 for c in cases if c.get("calibrated_step_s")])
    lo, hi = min(vals) / 1.2, max(vals) * 1.2
    ax.plot([lo, hi], [lo, hi], color="#6b7280", linewidth=1, label="y = x")
    ax.fill_between([lo, hi], [lo / 1.1, hi / 1.1], [lo * 1.1, hi * 1.1], color="#e5e7eb",
                    alpha=0.7, label="±10%")
    if hi / lo > 10:
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted step time (ms)")
    ax.set_ylabel("measured step time (ms)")
    med, mx = validation.get("median_abs_error"), validation.get("max_abs_error")
    ax.set_title(f"Predicted vs measured (median |err| {med:.0%}, max {mx:.0%})"
                 if med is not None else "Predicted vs measured")
    ax.legend(fontsize=7, frameon=False, loc="upper left")


def _speedups(ax, validation: dict) -> None:
    import matplotlib.ticker

    palette = plt.get_cmap("tab10")
    for i, (key, pts) in enumerate(sorted(_speedup_series(validation).items(), key=str)):
        model, arch, ps, part, b, rate = key
        label = " ".join(x for x in (model.rpartition(":")[2], arch, f"P={ps}" if ps else "",
                                     "tensor" if part == "tensor" else "", f"b={b}",
                                     rate or "loopback") if x)
        color = palette(i % 10)
        ax.plot([1] + [p[0] for p in pts], [1.0] + [p[1] for p in pts], color=color,
                linewidth=1.4, label=label)
        ax.scatter([p[0] for p in pts], [p[2] for p in pts], color=color, s=30, zorder=3)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("workers")
    ax.set_ylabel("speedup over one single-thread worker")
    ax.set_title("Speedup: predicted (lines), measured (points)")
    ax.legend(fontsize=6, frameon=False)


def plot_validation(validation: dict, path) -> None:
    """validation.json drawn: predicted against measured step time (y = x), and speedup
    against workers; written as PNG to ``path``."""
    from scalelab.results import write_text_atomic

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    _predicted_vs_measured(ax1, validation)
    _speedups(ax2, validation)
    for ax in (ax1, ax2):
        ax.grid(True, color="#e5e7eb", linewidth=0.8)
        ax.set_axisbelow(True)
    fig.tight_layout()
    write_text_atomic(path, _png(fig, tight=False))
