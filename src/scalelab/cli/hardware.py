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


def _num(value, fmt: str = "{:g}") -> str:
    return "-" if value is None else fmt.format(value)


def run_list(args) -> int:
    cat = hardware.catalog()
    if args.json:
        print(json.dumps({
            "devices": [d.to_dict() for d in cat.devices.values()],
            "links": [x.to_dict() for x in cat.links.values()],
            "networks": [n.to_dict() for n in cat.networks.values()],
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
    console.print(t)
    t = Table(title="intra-node links (per direction)")
    t.add_column("name")
    t.add_column("link")
    t.add_column("GB/s", justify="right")
    for x in cat.links.values():
        t.add_row(x.name, x.title, f"{x.bandwidth_Bps / 1e9:g}")
    console.print(t)
    t = Table(title="networks (per direction)")
    t.add_column("name", no_wrap=True)
    t.add_column("nominal Gb/s", justify="right")
    t.add_column("payload Gb/s", justify="right")
    t.add_column("aliases")
    for n in cat.networks.values():
        t.add_row(n.name, f"{n.gbps:g}", f"{n.payload_gbps:g}", ", ".join(n.aliases))
    console.print(t)
    return 0


def run_show(args) -> int:
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
    console.print(t)
    return 0
