"""``scalelab hardware list|show NAME``: the packaged catalog of devices, links, networks."""

from __future__ import annotations

import json

from rich.table import Table

from scalelab import hardware
from scalelab.cli._common import console

EPILOG = """examples:
  scalelab hardware list
  scalelab hardware show A100-SXM-80GB
  scalelab hardware show IB-FDR --json
  scalelab hardware fit
"""


def register(subparsers) -> None:
    from scalelab.cli import HelpFormatter

    p = subparsers.add_parser(
        "hardware",
        help="list or show the hardware catalog (devices, links, networks)",
        description="The hardware catalog: dense peak TFLOPS, memory, per-direction link and "
        "network rates, each figure with its source.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    sub = p.add_subparsers(dest="hw_command", metavar="ACTION")
    sub.required = True
    lp = sub.add_parser("list", help="every catalog entry")
    lp.add_argument("--json", action="store_true", help="print JSON instead of tables")
    lp.set_defaults(func=run_list)
    sp = sub.add_parser("show", help="one entry with its sources")
    sp.add_argument("name", metavar="NAME", help="catalog name or alias (A100, 10GbE, nvlink3)")
    sp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sp.set_defaults(func=run_show)
    fp = sub.add_parser("fit", help="the roofline fractions fitted to published throughputs")
    fp.add_argument("--json", action="store_true", help="print JSON instead of tables")
    fp.set_defaults(func=run_fit)


def _out():
    """The console to print tables on: the terminal's, or wide enough when piped that no
    number is cut to ``1...`` (rich assumes 80 columns without a terminal)."""
    from rich.console import Console

    return console if console.is_terminal else Console(width=240)


def _num(value, fmt: str = "{:g}") -> str:
    return "-" if value is None else fmt.format(value)


def run_list(args) -> int:
    out = _out()
    cat = hardware.catalog()
    if args.json:
        print(json.dumps({
            "devices": [d.to_dict() for d in cat.devices.values()],
            "links": [x.to_dict() for x in cat.links.values()],
            "networks": [n.to_dict() for n in cat.networks.values()],
            "example_clusters": example_clusters(),
        }, indent=2))
        return 0
    t = Table(title="devices (dense peak TFLOPS)", caption="- : unknown or not supported")
    for col in ("name", "FP32", "TF32", "BF16", "FP16", "mem GiB", "mem GB/s", "link"):
        left = col in ("name", "link")
        t.add_column(col, justify="left" if left else "right", no_wrap=left)
    for d in cat.devices.values():
        t.add_row(
            d.name, _num(d.fp32_tflops), _num(d.tf32_tflops), _num(d.bf16_tflops),
            _num(d.fp16_tflops),
            _num(None if d.memory_bytes is None else d.memory_bytes / 2**30, "{:.0f}"),
            _num(None if d.memory_bandwidth_Bps is None else d.memory_bandwidth_Bps / 1e9,
                 "{:.0f}"),
            d.intra_node or "-",
        )
    out.print(t)
    t = Table(title="intra-node links (per direction)")
    t.add_column("name")
    t.add_column("link")
    t.add_column("GB/s", justify="right")
    for x in cat.links.values():
        t.add_row(x.name, x.title, f"{x.bandwidth_Bps / 1e9:g}")
    out.print(t)
    t = Table(title="networks (per direction)")
    t.add_column("name", no_wrap=True)
    t.add_column("nominal Gb/s", justify="right")
    t.add_column("payload Gb/s", justify="right")
    t.add_column("aliases")
    for n in cat.networks.values():
        t.add_row(n.name, f"{n.gbps:g}", f"{n.payload_gbps:g}", ", ".join(n.aliases))
    out.print(t)
    out.print(example_clusters_table())
    return 0


def example_clusters() -> list[dict]:
    """The example cluster files shipped in the package (``--cluster NAME`` takes them from
    any folder): name, nodes, devices per node, device, network, architecture."""
    from scalelab.paths import default_clusters
    from scalelab.results import read_toml

    rows = []
    for path in default_clusters():
        c = read_toml(path)
        rows.append({"name": path.stem, "nodes": c.get("nodes", 1),
                     "gpus_per_node": c.get("gpus_per_node", 1), "device": c.get("device"),
                     "network": c.get("network") or c.get("network_gbps"),
                     "architecture": c.get("architecture")})
    return rows


def example_clusters_table():
    t = Table(title="example clusters (--cluster NAME from any folder)")
    for col in ("name", "nodes", "GPUs/node", "device", "network", "architecture"):
        t.add_column(col, justify="right" if col in ("nodes", "GPUs/node") else "left",
                     no_wrap=col == "name")
    for r in example_clusters():
        t.add_row(r["name"], str(r["nodes"]), str(r["gpus_per_node"]), r["device"] or "-",
                  str(r["network"] or "-"), r["architecture"] or "-")
    return t


def run_show(args) -> int:
    out = _out()
    kind, entry = hardware.lookup(args.name)
    d = entry.to_dict()
    if args.json:
        print(json.dumps({"kind": kind, **d}, indent=2))
        return 0
    t = Table(title=f"{kind} {entry.name}", show_header=False)
    t.add_column("field")
    t.add_column("value", overflow="fold")
    for k, v in d.items():
        if k == "name":
            continue
        if isinstance(v, list):
            v = ", ".join(v) or "-"
        t.add_row(k, "unknown" if v is None else str(v))
    out.print(t)
    return 0


def run_fit(args) -> int:
    """Per device and compute units: e_c, e_m, the points behind them, the error band."""
    out = _out()
    from scalelab.hardware import packaged
    from scalelab.hardware.packaged import fit_and_bands
    from scalelab.hardware.reference import reference

    (f, b), ref = fit_and_bands(), reference()
    shipped = packaged.current_file() if packaged.current() is not None else None
    source = (f"as shipped: {packaged.PATH.name}, the reference models' operations counted "
              f"with torch {shipped['torch']}" if shipped else
              "fitted here (the package's copy is not this code's)")
    rows = [{"device": d, "units": c, "e_c": v.e_c, "e_m": v.e_m, "points": v.points,
             "band": b.seen[c], "host_s_per_op": v.host_s_per_op, "host_bound": v.host_bound,
             "kernel_s": v.kernel_s}
            for (d, c), v in sorted(f.devices.items())]
    pooled = [{"units": c, "e_c": v.e_c, "e_m": v.e_m, "band_unseen": b.unseen.get(c)}
              for c, v in sorted(f.pooled.items())]
    factors = [{"units": c, "op_class": name, "k_c": kc, "k_m": km}
               for c, fs in sorted(f.factors.items()) for name, kc, km in fs]
    if args.json:
        print(json.dumps({"devices": rows, "pooled": pooled, "factors": factors,
                          "fit_source": source, "launch_s": ref.launch_s,
                          "points": [vars(p) for p in ref.points]}, indent=2))
        return 0
    t = Table(title=f"roofline fractions fitted to {len(ref.points)} published points",
              caption="band: the fit's leave-one-out error for a fitted device; a device "
                      "with no points takes its GPU generation's fractions (nearest one "
                      "fitted), the pool only when none is")
    for col in ("device", "units", "e_c", "e_m", "us/kernel", "points", "band", "host us/op"):
        t.add_column(col, justify="left" if col in ("device", "units") else "right")
    for r in rows:
        host = f"{r['host_s_per_op'] * 1e6:.1f}" + (f" ({r['host_bound']} set)"
                                                     if r["host_bound"] else "")
        t.add_row(r["device"], r["units"], f"{r['e_c']:.2f}", f"{r['e_m']:.2f}",
                  f"{r['kernel_s'] * 1e6:.1f}" if r["kernel_s"] else "-",
                  str(r["points"]), f"{r['band']:.0%}", host)
    for r in pooled:
        t.add_row("(pool)", r["units"], f"{r['e_c']:.2f}", f"{r['e_m']:.2f}", "-", "0",
                  "-" if r["band_unseen"] is None else f"{r['band_unseen']:.0%}", "-")
    out.print(t)
    out.print("us/kernel: the device's own cost per kernel, added to its roofline, fitted where "
              "its points in that class hold several networks ('-': none)")
    out.print("host us/op: the host's time per operation fitted with the device's fractions "
              "(its points' steps floored at operations x it); '(n set)': points it sets")
    out.print(f"step floor: kernels x {ref.launch_s * 1e6:g} us ({ref.launch_source})")
    out.print(f"the fit: {source}")
    for c in sorted({r["units"] for r in factors}):
        each = ", ".join(f"{r['op_class']} x{r['k_c']:.2f} compute, x{r['k_m']:.2f} memory"
                         for r in factors if r["units"] == c)
        out.print(f"operation classes on {c} units, on e_c and e_m (others x1): {each}; "
                  "conv_nchw: a dense convolution not in channels_last")
    return 0
