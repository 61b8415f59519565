"""Figures of the plan stage: predicted speedup and efficiency against device count."""

from __future__ import annotations

from collections import defaultdict

from scalelab.report.figures._style import COLORS, legend_below, plt
from scalelab.report.figures._style import png as _png
from scalelab.report.figures._style import style as _style

#: the most series one panel shows; more go to one row of panels per network
MAX_SERIES = 5


def linear_line(counts) -> tuple[list[int], list[int]]:
    """The ideal speedup's points: y = x at every device count of the sweep (drawn through
    each, so the line is straight on a log x axis too)."""
    xs = sorted({int(g) for g in counts})
    return xs, list(xs)


def panel_groups(labels: list[str]) -> list[list[str]]:
    """The series of each row of panels: all in one row when there are at most
    :data:`MAX_SERIES`, else one row per network (the part after ' @ ')."""
    if len(labels) <= MAX_SERIES:
        return [sorted(labels)]
    nets: dict[str, list[str]] = defaultdict(list)
    for label in sorted(labels):
        nets[label.split(" @ ")[-1]].append(label)
    return list(nets.values())


def _series(plans: list[dict]) -> tuple[dict[str, list[dict]], float | None]:
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
    return series, target


def scaling_figure(plans: list[dict], runs: list[dict], validations: list[dict]):
    """The figure of :func:`scaling` (None without a sweep): speedup and efficiency side by
    side, one row of the two per network when the series are more than :data:`MAX_SERIES`."""
    series, target = _series(plans)
    if not series:
        return None
    groups = panel_groups(list(series))
    fig, axes = plt.subplots(len(groups), 2, figsize=(10, 3.8 * len(groups)), squeeze=False)
    measured = _measured_speedups(runs, validations)
    for (ax1, ax2), labels in zip(axes, groups):
        _scaling_row(ax1, ax2, {k: series[k] for k in labels}, measured, target,
                     title=(f" ({labels[0].split(' @ ')[-1]})" if len(groups) > 1 else ""))
    fig.tight_layout()
    legend_below(fig, list(axes.flat), ncol=3)
    return fig


def _scaling_row(ax1, ax2, series: dict[str, list[dict]], measured, target, title: str):
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
    xs, ys = linear_line(allg)
    ax1.plot(xs, ys, color="#d1d5db", linewidth=1, label="linear")
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
    ax1.set_title("Predicted speedup" + title)
    ax2.set_title("Predicted efficiency" + title)


def scaling(plans: list[dict], runs: list[dict], validations: list[dict]) -> bytes | None:
    """Speedup and efficiency against device count, per architecture and network, with the
    target efficiency and any measured points (PNG)."""
    fig = scaling_figure(plans, runs, validations)
    return None if fig is None else _png(fig)


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


def predicted_row(plans: list[dict], arch, gpus) -> dict[str, float] | None:
    """The plan's prediction for ``arch`` on ``gpus`` devices; plans whose compute time was
    estimated (for another device or precision) are no prediction of a run here."""
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


def plan_figure(series: dict[str, list], architectures: list[str], max_gpus: int,
                target_efficiency: float, title: str):
    """The figure of :func:`plot_plan`: one row of (speedup, efficiency) for all the lines
    when they are at most :data:`MAX_SERIES`, else one row per network."""
    nets = list(series)
    rows = [nets] if len(nets) * len(architectures) <= MAX_SERIES else [[n] for n in nets]
    fig, axes = plt.subplots(len(rows), 2, figsize=(11, 4.2 * len(rows)), squeeze=False)
    styles = {"ps": "-", "allreduce": "--", "hierarchical": ":"}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (ax_s, ax_e), row_nets in zip(axes, rows):
        for net in row_nets:
            i = nets.index(net)
            for a in architectures:
                rs = [r for r in series[net] if r.architecture == a]
                label = f"{a}, {net}" + (" (cluster)" if i == 0 else "")
                kw = {"color": colors[i % len(colors)], "linestyle": styles[a],
                      "linewidth": 2.2 if i == 0 else 1.2}
                ax_s.plot([r.gpus for r in rs], [r.speedup for r in rs], label=label, **kw)
                ax_e.plot([r.gpus for r in rs], [r.efficiency for r in rs], **kw)
        counts = [r.gpus for net in row_nets for r in series[net]] or [1, max_gpus]
        xs, ys = linear_line(counts)
        ax_s.plot(xs, ys, color="grey", linewidth=0.8, label="linear")
        ax_e.axhline(target_efficiency, color="grey", linewidth=0.8, linestyle="-.")
        ax_e.text(1, target_efficiency, f" target {target_efficiency:g}", va="bottom",
                  fontsize=8, color="grey")
        for ax, name in ((ax_s, "speedup"), (ax_e, "efficiency")):
            ax.set_xlabel("devices (GPUs)")
            ax.set_ylabel(name)
            if max_gpus >= 16:
                ax.set_xscale("log", base=2)
            ax.grid(True, alpha=0.3)
        ax_e.set_ylim(0, 1.05)
        ax_s.legend(fontsize=7, ncol=1, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_plan(series: dict[str, list], architectures: list[str], max_gpus: int,
              target_efficiency: float, title: str, path) -> None:
    """Speedup and efficiency against device count, one line per network and architecture.

    ``series`` maps a network's label to its sweep rows (objects with ``gpus``,
    ``architecture``, ``speedup``, ``efficiency``); the first is the cluster's own network.
    Written as PNG to ``path``.
    """
    from scalelab.results import write_text_atomic

    fig = plan_figure(series, architectures, max_gpus, target_efficiency, title)
    write_text_atomic(path, _png(fig, tight=False))
