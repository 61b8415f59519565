"""The report's recommendation cards and predicted-sweep table, from plan.json dicts.

Each card names the cluster it is for (nodes x devices, network), the alternatives a reader
weighs (the planner's own when the plan has them, else the sweep's row at the cluster's
full size), and the launch command; the sweep table carries a band column when the
predictions carry one.
"""

from __future__ import annotations

from typing import Any


def _reason_text(r: Any) -> str:
    if isinstance(r, str):
        return r
    if isinstance(r, dict):
        return str(r.get("reason") or r.get("text") or r)
    return str(r)


def plan_label(p: dict) -> str:
    """A short name for the cluster a plan is for."""
    inputs = p.get("inputs") or {}
    if inputs.get("cluster_name"):
        return str(inputs["cluster_name"])
    return cluster_summary(p) or "plan"


def plural_text(n: Any, word: str) -> str:
    from scalelab.text import plural

    return plural(n, word) if isinstance(n, int) else f"{n} {word}s"


def cluster_summary(p: dict) -> str:
    """The cluster a plan is for, in words: ``4 nodes x 8 A100-SXM-80GB, 100GbE``."""
    c = (p.get("inputs") or {}).get("cluster") or {}
    if not c:
        return ""
    net = c.get("network") or (f"{c['network_gbps']:g} Gb/s" if c.get("network_gbps") else "")
    per_node = c.get("gpus_per_node", "?")
    device = c.get("device") or ("GPU" if per_node == 1 else "GPUs")
    text = f"{plural_text(c.get('nodes', '?'), 'node')} x {per_node} {device}"
    return f"{text}, {net}" if net else text


def _cluster_gpus(p: dict) -> int | None:
    c = (p.get("inputs") or {}).get("cluster") or {}
    nodes, per_node = c.get("nodes"), c.get("gpus_per_node")
    return nodes * per_node if isinstance(nodes, int) and isinstance(per_node, int) else None


def _row_text(row: dict, what: str) -> str:
    from scalelab.plan.advice import floor2

    return (f"{what} {row['samples_per_s']:,.0f} samples/s at efficiency "
            f"{floor2(row['efficiency'])}")


def _planned_alternatives(rec: dict) -> list[str]:
    """The planner's own alternatives (plan.json's ``recommendation.alternatives``)."""
    out = []
    for a in rec.get("alternatives") or []:
        if not isinstance(a, dict) or (a.get("gpus") == rec.get("gpus") and
                                       a.get("architecture") == rec.get("architecture")):
            continue
        if not isinstance(a.get("samples_per_s"), (int, float)) or \
                not isinstance(a.get("efficiency"), (int, float)):
            continue
        out.append(_row_text(a, f"{a.get('label', 'alternative')}: {a.get('architecture')} "
                                f"on {plural_text(a.get('gpus'), 'GPU')} would give"))
    return out


def alternatives(p: dict) -> list[str]:
    """What the reader weighs against the recommendation: the planner's alternatives when
    the plan has them, else every device of the cluster (the sweep's row at the cluster's
    size, recommended architecture); then the other architectures at the recommended
    count."""
    rec = p.get("recommendation") or {}
    arch, gpus = rec.get("architecture"), rec.get("gpus")
    rows = [r for r in p.get("sweep", []) if isinstance(r.get("samples_per_s"), (int, float))
            and isinstance(r.get("efficiency"), (int, float))]
    out = _planned_alternatives(rec)
    total = _cluster_gpus(p)
    full = next((r for r in rows if r.get("architecture") == arch and r.get("gpus") == total),
                None)
    if not out and full is not None and total != gpus:
        out.append(_row_text(full, f"all {total} GPUs ({arch}) would give"))
    listed = {(a.get("architecture"), a.get("gpus")) for a in rec.get("alternatives") or []
              if isinstance(a, dict)}
    for r in rows if isinstance(gpus, int) and gpus > 1 else []:  # one device: no exchange
        if r.get("gpus") == gpus and r.get("architecture") != arch and \
                (r.get("architecture"), gpus) not in listed:
            out.append(_row_text(r, f"{r['architecture']} on the same "
                                    f"{plural_text(gpus, 'GPU')}:"))
    return out


def recommendations(plans: list[dict], profiles: list[dict]) -> list[dict]:
    """The headline: one recommendation per plan (its line and tiles from
    :mod:`scalelab.plan.story`, as the terminal prints them), else what the profile chose."""
    from scalelab.plan import story

    recs = []
    for p in plans:
        rec = p.get("recommendation")
        if not rec:
            continue
        if p.get("kind") == "language-model":  # a parallel layout: its own tiles
            from scalelab.plan.lm.story import report_card

            recs.append(report_card(p, plan_label(p), cluster_summary(p)))
            continue
        recs.append({
            "title": plan_label(p),
            "cluster": cluster_summary(p),
            "headline": story.headline(p, alternatives=False),
            "cards": story.cards(p),
            "alternatives": [] if rec.get("too_small") else alternatives(p),
            "launch": rec.get("launch") or "",
            "reasons": [_reason_text(r) for r in rec.get("reasons", [])],
            "warnings": [_reason_text(w) for w in p.get("warnings", [])],
            "estimate": bool(p.get("estimate")),
            "estimate_of": p.get("estimate_of") or "device",
        })
    if recs:
        return recs
    for prof in profiles:
        algo = (prof.get("algorithms") or {}).get("chosen")
        return [{
            "title": "this device",
            "cluster": "the device profiled, "
                       + str((prof.get("environment") or {}).get("device_name")
                             or prof.get("device") or "?"),
            "cards": [("batch size / device", prof.get("recommended_batch_size")),
                      ("largest batch that fits", prof.get("max_batch_size")),
                      ("computation", algo or "default")],
            "alternatives": [],
            "reasons": ["batch: the smallest measured batch within 5% of the best throughput"],
            "warnings": [],
            "estimate": False,
        }]
    return []


def _band_text(row: dict) -> str | None:
    """A row's band on its step time as ``-a% / +b%``, or None when it carries none."""
    step, lo, hi = row.get("step_s"), row.get("step_s_low"), row.get("step_s_high")
    band = row.get("band")
    if isinstance(band, dict) and isinstance(step, (int, float)) and lo is None and hi is None:
        if isinstance(band.get("low"), (int, float)) and isinstance(band.get("high"),
                                                                       (int, float)):
            lo, hi = step * band["low"], step * band["high"]
    if isinstance(band, (int, float)) and lo is None and hi is None:
        return f"±{band * 100:.0f}%"
    if not all(isinstance(v, (int, float)) for v in (step, lo, hi)) or not step > 0:
        return None
    return f"-{(step - lo) / step * 100:.0f}% / +{(hi - step) / step * 100:.0f}%"


def _shown_counts(rec_gpus: Any, total: int | None, counts: list[int]) -> set[int]:
    """Device counts worth a table row: powers of two, the recommendation, the cluster."""
    keep = {g for g in counts if g & (g - 1) == 0}
    keep |= {g for g in (rec_gpus, total) if isinstance(g, int)}
    return keep


def sweep_rows(plans: list[dict]) -> tuple[list[list[str]], list[str]]:
    """The recommended architecture's predicted rows per plan; a ± column when the
    predictions carry a band."""
    from scalelab.text import format_s

    rows, banded = [], False
    for p in plans:
        rec = p.get("recommendation") or {}
        arch = rec.get("architecture")
        mine = [r for r in p.get("sweep", []) if r.get("architecture") == arch
                and isinstance(r.get("gpus"), int)]
        keep = _shown_counts(rec.get("gpus"), _cluster_gpus(p), [r["gpus"] for r in mine])
        for r in sorted(mine, key=lambda r: r["gpus"]):
            if r["gpus"] not in keep:
                continue
            band = _band_text(r)
            banded = banded or band is not None
            mark = (" (upper bound: step too small)" if rec.get("too_small") else
                    " (recommended)" if r["gpus"] == rec.get("gpus") else "")
            rows.append([f"{plan_label(p)}: {arch}{mark}", str(r["gpus"]),
                         format_s(r["step_s"]) if isinstance(r.get("step_s"), (int, float))
                         else "-", band or "-",
                         f"{r['samples_per_s']:,.0f}" if isinstance(r.get("samples_per_s"),
                                                                    (int, float)) else "-",
                         f"{r['efficiency']:.2f}" if isinstance(r.get("efficiency"),
                                                                (int, float)) else "-",
                         str(r.get("bottleneck") or "-")])
    header = ["plan", "devices", "step", "±", "samples/s", "efficiency", "bottleneck"]
    if not banded:
        rows = [r[:3] + r[4:] for r in rows]
        header = header[:3] + header[4:]
    return rows, header
