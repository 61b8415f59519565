"""A language-model plan's story in one line, from plan.json (the terminal and the report's
headline read the same :func:`headline`)."""

from __future__ import annotations

from typing import Any

GIB = 2**30


def layout_text(r: dict[str, Any]) -> str:
    """'tp 8 x pp 2 (1f1b) x dp 4, zero1, micro-batch 1 x 32, recompute selective, bf16'."""
    parts = [f"tp {r['tp']}" + (" +sp" if r.get("sequence_parallel") else "")]
    pp = f"pp {r['pp']}"
    if r["pp"] > 1:
        pp += f" ({r['schedule']}" + (f", vpp {r['vpp']}" if r.get("vpp", 1) > 1 else "") + ")"
    parts.append(pp)
    if r.get("cp", 1) > 1:
        parts.append(f"cp {r['cp']}")
    parts.append(f"dp {r['dp']}")
    return (" x ".join(parts) + f", {r['layout']}, micro-batch {r['micro_batch']} x "
            f"{r['accumulation']}, recompute {r['recompute']}, {r['precision']}")


def _rate(r: dict[str, Any]) -> str:
    x, lo, hi = r["tokens_per_s"], r.get("tokens_per_s_low"), r.get("tokens_per_s_high")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and hi > lo:
        return f"{x:,.0f} tokens/s ({lo:,.0f}-{hi:,.0f})"
    return f"{x:,.0f} tokens/s"


def headline(p: dict[str, Any]) -> str:
    """What to use and what it gives, in one line."""
    r = p["recommendation"]
    usable = ((p.get("inputs") or {}).get("target") or {})
    cap = usable.get("memory_bytes", 0) * usable.get("memory_margin", 1)
    verb = "evaluated" if r.get("evaluated_only") else "recommend"
    text = (f"{verb} {layout_text(r)} on {r['gpus']:,} {r['device']} for {r.get('model')} at "
            f"seq {r['seq_len']}, global batch {r['global_batch']}: {_rate(r)}, MFU "
            f"{r['mfu']:.1%}, {r['memory_bytes'] / GIB:,.1f} GiB per GPU"
            + (f" of {cap / GIB:,.1f} usable" if cap else ""))
    if r.get("cost_per_million_tokens") is not None:
        text += f", ${r['cost_per_million_tokens']:.3f} per million tokens"
    if r.get("train_days") is not None:
        text += f"; the budget in {r['train_days']:,.1f} days"
        if r.get("train_cost") is not None:
            text += f" for ${r['train_cost']:,.0f}"
    return text


def _alternative(a: dict[str, Any]) -> str:
    cpm = a.get("cost_per_million_tokens")
    return (f"{a['device']}: {layout_text(a)}: {a['tokens_per_s']:,.0f} tokens/s, MFU "
            f"{a['mfu']:.1%}, {a['memory_bytes'] / GIB:,.1f} GiB per GPU"
            + (f", ${cpm:.3f} per million tokens" if cpm is not None else ""))


def cards(p: dict[str, Any]) -> list[tuple[str, Any]]:
    """The report's tiles of a language-model plan."""
    r = p["recommendation"]
    cpm = r.get("cost_per_million_tokens")
    return [("model", f"{r.get('model')} at seq {r['seq_len']}"),
            ("global batch", f"{r['global_batch']} = {r['micro_batch']} x {r['accumulation']}"
                             f" x dp {r['dp']}"),
            ("tp / pp / cp / dp", f"{r['tp']} / {r['pp']} / {r['cp']} / {r['dp']}"),
            ("schedule", f"{r['schedule']}" + (f", vpp {r['vpp']}" if r["vpp"] > 1 else "")
             if r["pp"] > 1 else "-"),
            ("layout", r["layout"]), ("recompute", r["recompute"]),
            ("precision", r["precision"]),
            ("tokens/s", _rate(r).replace(" tokens/s", "")), ("MFU", f"{r['mfu']:.1%}"),
            ("memory / GPU", f"{r['memory_bytes'] / GIB:,.1f} GiB"),
            ("$ / M tokens", "-" if cpm is None else f"{cpm:.3f}"),
            ("train days", "-" if r.get("train_days") is None else f"{r['train_days']:,.1f}")]


def report_card(p: dict[str, Any], title: str, cluster: str) -> dict[str, Any]:
    """A language-model plan as the report's recommendation card."""
    r = p["recommendation"]
    return {"title": title, "cluster": cluster, "headline": headline(p), "cards": cards(p),
            "alternatives": [_alternative(a) for a in r.get("alternatives") or []],
            "launch": r.get("launch") or "", "reasons": list(r.get("reasons") or []),
            "warnings": list(p.get("warnings") or []), "estimate": bool(p.get("estimate")),
            "estimate_of": p.get("estimate_of") or "device"}
