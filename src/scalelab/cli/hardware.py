"""``scalelab hardware list|show NAME``: the packaged hardware catalog."""

from __future__ import annotations

import json

from rich.table import Table

from scalelab.cli import HelpFormatter
from scalelab.cli._common import console

EPILOG = """examples:
  scalelab hardware list
  scalelab hardware show A100-SXM-80GB
  scalelab hardware show IB-FDR --json
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "hardware", help="list or show devices, links and networks in the catalog",
        description="The hardware catalog: dense peak TFLOPS, memory, per-direction link "
                    "and network bandwidth, each figure with its source.",
        epilog=EPILOG, formatter_class=HelpFormatter,
    )
    sub = p.add_subparsers(dest="hardware_command", metavar="list|show", required=True)
    ls = sub.add_parser("list", help="every entry, one line each", epilog=EPILOG,
                        formatter_class=HelpFormatter)
    ls.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ls.set_defaults(func=run_list)
    show = sub.add_parser("show", help="one entry with its sources", epilog=EPILOG,
                          formatter_class=HelpFormatter)
    show.add_argument("name", metavar="NAME", help="a device, link or network name or alias")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=run_show)


def _fmt(v, scale=1.0, digits=1) -> str:
    return "-" if v is None else f"{v / scale:,.{digits}f}"


def run_list(args) -> int:
    from scalelab.hardware import catalog

    cat = catalog()
    if args.json:
        print(json.dumps({
            "devices": [d.to_dict() for d in cat.devices.values()],
            "links": [x.to_dict() for x in cat.links.values()],
            "networks": [n.to_dict() for n in cat.networks.values()],
        }, indent=2))
        return 0
    t = Table(title="devices (dense peak TFLOPS)")
    t.add_column("name", no_wrap=True)
    for col in ("FP32", "TF32", "BF16", "FP16", "GiB", "GB/s"):
        t.add_column(col, justify="right")
    t.add_column("link", no_wrap=True)
    for d in cat.devices.values():
        t.add_row(d.name, _fmt(d.fp32_tflops), _fmt(d.tf32_tflops), _fmt(d.bf16_tflops),
                  _fmt(d.fp16_tflops), _fmt(d.memory_bytes, 2**30, 0),
                  _fmt(d.memory_bandwidth_Bps, 1e9, 0), d.intra_node or "")
    console.print(t)
    t = Table(title="intra-node links (per direction)")
    t.add_column("name")
    t.add_column("link")
    t.add_column("GB/s", justify="right")
    for x in cat.links.values():
        t.add_row(x.name, x.title, f"{x.bandwidth_Bps / 1e9:,.2f}")
    console.print(t)
    t = Table(title="networks (per direction)")
    t.add_column("name")
    t.add_column("nominal Gb/s", justify="right")
    t.add_column("payload Gb/s", justify="right")
    for n in cat.networks.values():
        t.add_row(n.name, f"{n.gbps:g}", f"{n.payload_gbps:g}")
    console.print(t)
    console.print("sources: scalelab hardware show NAME")
    return 0


def run_show(args) -> int:
    from scalelab.hardware import lookup

    kind, entry = lookup(args.name)
    d = {"kind": kind, **entry.to_dict()}
    if args.json:
        print(json.dumps(d, indent=2))
        return 0
    t = Table(title=f"{kind} {entry.name}", show_header=False)
    t.add_column("field")
    t.add_column("value", overflow="fold")
    for k, v in d.items():
        if k in ("kind", "name"):
            continue
        if isinstance(v, list):
            v = ", ".join(v) or "-"
        t.add_row(k, "unknown" if v is None else str(v))
    console.print(t)
    return 0
