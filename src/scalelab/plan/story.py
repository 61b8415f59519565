"""One story of a recommendation on every page: the terminal's line and the report's
headline and cards are all written here, from plan.json's ``recommendation`` (what
:meth:`scalelab.plan.Plan.to_dict` gives), so they cannot disagree.

A step too small for the cluster to matter has no throughput, devices, architecture or
network to show: only the batch, the computation, the step and why.
"""

from __future__ import annotations

from typing import Any

from scalelab.text import format_gbps, plural
from scalelab.theory.units import ceil_div


def _floor2(x: float) -> str:
    from scalelab.plan.advice import floor2

    return floor2(x)


def _options(p: dict) -> tuple[float | None, int | None]:
    opts = (p.get("inputs") or {}).get("options") or {}
    return opts.get("target_efficiency"), opts.get("max_gpus")


def _total(p: dict) -> int | None:
    c = (p.get("inputs") or {}).get("cluster") or {}
    n, g = c.get("nodes"), c.get("gpus_per_node")
    return n * g if isinstance(n, int) and isinstance(g, int) else None


def _rate(r: dict) -> str:
    x, lo, hi = r.get("samples_per_s"), r.get("samples_per_s_low"), r.get("samples_per_s_high")
    if not isinstance(x, (int, float)):
        return "-"
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and hi > lo:
        return f"{x:,.0f} ({lo:,.0f}-{hi:,.0f})"
    return f"{x:,.0f}"


def network_text(p: dict) -> str:
    """What the network must carry for the whole cluster to keep the target."""
    r = p["recommendation"]
    target, max_g = _options(p)
    need = r.get("network_gbps_needed") or 0.0
    if need > 0 and max_g:
        return (f"{max_g} devices at efficiency {target:g} need {format_gbps(need)} per node"
                + _nics(p))
    if max_g and max_g > 1:
        return (f"one node: no network needed; its device link needs "
                f"{format_gbps(r.get('intra_node_gbps_needed') or 0.0)} for {max_g} devices")
    return "one device: nothing to exchange"


def _nics(p: dict) -> str:
    """`` (its 8 NICs together)`` when a node has several NICs, so per-node bandwidth is
    never read as one NIC's rate."""
    nics = (p.get("inputs") or {}).get("nics_per_node")
    return f" (its {nics} NICs together)" if isinstance(nics, int) and nics > 1 else ""


def servers_text(r: dict) -> str:
    if r.get("architecture") != "ps" or not r.get("num_ps"):
        return ""
    return (f", {plural(r['num_ps'], 'parameter server')} (lemma minimum "
            f"{r.get('num_ps_min', 0)})")


def alternatives_text(p: dict) -> str:
    r = p["recommendation"]
    alts = [a for a in r.get("alternatives") or []
            if a.get("gpus") != r.get("gpus") or a.get("architecture") != r.get("architecture")]
    return "; ".join(f"{a['label']}: {plural(a['gpus'], 'GPU')}, {a['samples_per_s']:,.0f} "
                     f"samples/s, speedup {a['speedup']:.2f}, efficiency "
                     f"{_floor2(a['efficiency'])}" for a in alts)


def unfit(r: dict) -> dict | None:
    """The recommended layout's memory row when the recommended batch does not fit the
    device (``recommendation.layouts``: ``fits`` false), else None."""
    lay = r.get("layout") or "ddp"
    for row in r.get("layouts") or []:
        if (row.get("layout") == lay and row.get("gpus") == r.get("gpus")
                and row.get("fits") is False):
            return row
    return None


def unfit_text(r: dict) -> str:
    """What the device's memory says of the recommended batch, when it does not hold it."""
    row = unfit(r)
    if row is None:
        return ""
    need, usable = row["memory_bytes"] / 2**30, row["usable_bytes"] / 2**30
    text = (f"batch {r['batch_size']} does not fit the device ({need:,.2f} GiB against "
            f"{usable:,.2f} GiB usable)")
    largest = row.get("largest_batch")
    if largest:
        steps = ceil_div(int(r["batch_size"]), int(largest))
        text += (f"; it holds at most batch {largest}, which the launch trains ({steps} steps "
                 f"of gradient accumulation make {r['batch_size']}); the figures are for "
                 f"batch {r['batch_size']}")
    return text + ": "


def _in(r: dict) -> str:
    """' in bf16 (channels_last)' where the plan chose or was told a precision."""
    p = r.get("precision")
    if not p or (p == "fp32" and not r.get("target")):  # PyTorch's default, as measured
        return ""
    return f" in {p}" + (" (channels_last)" if r.get("channels_last") else "")


def headline(p: dict, alternatives: bool = True) -> str:
    """The recommendation in one line: what to use, what it gives, what the cluster needs."""
    r = p["recommendation"]
    target, max_g = _options(p)
    if r.get("too_small"):
        return f"recommend batch {r['batch_size']}: {r['too_small']}"
    alts = alternatives_text(p) if alternatives else ""
    alts = f" (alternatives: {alts})" if alts else ""
    need = network_text(p)
    if r["gpus"] == 1 and (max_g or 1) > 1:
        return (f"{unfit_text(r)}recommend 1 GPU at batch {r['batch_size']}{_in(r)}: "
                "already 2 GPUs "
                f"fall below efficiency {target:g}{alts}; {need}")
    below = (f" (below target {target:g})" if target is not None
             and r["efficiency"] < target - 1e-12 else "")
    lay = r.get("layout") or "ddp"  # a sharded layout of the model state (ZeRO / FSDP)
    sharded = "" if lay == "ddp" else f" with {lay.replace('zero', 'ZeRO-')}"
    # one device exchanges nothing: no architecture to name (the report's tile says so too)
    what = (f"1 GPU{sharded}" if r["gpus"] == 1
            else f"{r['architecture']}{sharded} on {plural(r['gpus'], 'GPU')}")
    return (f"{unfit_text(r)}recommend {what} at batch {r['batch_size']}{_in(r)}"
            f"{servers_text(r)}: "
            f"{_rate(r)} samples/s, efficiency "
            f"{_floor2(r['efficiency'])}{below}{alts}; {need}")


def cards(p: dict) -> list[tuple[str, Any]]:
    """The report's tiles, in the order a reader asks: what to set, what it gives."""
    r = p["recommendation"]
    target, max_g = _options(p)
    head = [("batch size / device", r.get("batch_size")),
            ("computation", r.get("algorithm") or "default")]
    if unfit(r) is not None:
        head.append(("memory", unfit_text(r).rstrip(": ")))
    if r.get("too_small"):
        return head + [("step", "too small for the cluster to matter")]
    total = _total(p)
    gpus = r.get("gpus")
    one = gpus == 1
    need = r.get("network_gbps_needed") or 0.0
    out = head + [
        ("architecture", "- (one device)" if one else r.get("architecture")),
        ("devices", f"{gpus} of {total}" if total else gpus),
        ("parameter servers", f"{r.get('num_ps')} (min {r.get('num_ps_min')})"
         if r.get("architecture") == "ps" and r.get("num_ps") else "-"),
        (f"network for all {max_g}" if max_g else "network needed",
         f"{format_gbps(need)} per node{_nics(p)}" if need > 0 else "-"),
        ("loader processes", r.get("loader_workers")),
        ("samples/s", _rate(r)),
        ("efficiency", _floor2(r["efficiency"]) + (
            f" (below {target:g})" if target is not None and r["efficiency"] < target - 1e-12
            else "") if isinstance(r.get("efficiency"), (int, float)) else "-"),
    ]
    return out
