"""``scalelab calibrate``: fit the step model's free parameters to measured runs."""

from __future__ import annotations

import json
import sys

EPILOG = """examples:
  scalelab calibrate validation.json --out calibration.json
  scalelab calibrate run-w2.json run-w4.json --free bandwidth_efficiency,latency_s
  scalelab plan --profile profile.json --cluster cluster.toml --calibration calibration.json
  scalelab validate MODEL --grid "..." --calibration calibration.json

Reads validation.json files (every case) and run.json files of synchronous parameter-server
runs on an emulated network (--emulate-network). Fits, by least squares of the log step-time
ratio, the fraction of link bandwidth achieved, the per-message latency, the overlap of the
exchange with backward and a factor on compute time.
"""


def register(subparsers) -> None:
    from scalelab.cli import HelpFormatter

    p = subparsers.add_parser(
        "calibrate", help="fit the model's free parameters to measured runs",
        description="Fit bandwidth efficiency, per-message latency, overlap and a compute "
        "factor to run/validation files; writes scalelab.calibration/1.",
        epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("files", nargs="+", metavar="RUN_OR_VALIDATION_FILE")
    p.add_argument("--out", default="calibration.json", help="default calibration.json")
    p.add_argument("--free", default=None, metavar="P1,P2",
                   help="parameters to fit (default all: bandwidth_efficiency, latency_s, "
                   "overlap, compute_scale); the others stay neutral")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true", help="print calibration.json to stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from rich.table import Table

    from scalelab import calibration
    from scalelab.cli._common import console
    from scalelab.results import write_json

    free = tuple(s.strip() for s in args.free.split(",") if s.strip()) if args.free else None
    if free is not None and not free:
        from scalelab.errors import UsageError

        raise UsageError("--free names no parameter")
    obs = calibration.load_observations(args.files)
    result = calibration.fit(obs, free)
    doc = calibration.document(result, obs, [str(f) for f in args.files])
    if args.out:
        write_json(args.out, "calibration", doc)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
    elif not args.quiet:
        t = Table(title=f"scalelab calibrate ({len(obs)} cases)")
        t.add_column("parameter")
        t.add_column("value", justify="right")
        t.add_column("fitted")
        for k, v in doc["params"].items():
            t.add_row(k, f"{v:.4g}", "yes" if k in result.free else "no (neutral)")
        console.print(t)
        b, a = result.before, result.after
        console.print(f"|error| on the fitted cases: median {b['median_abs_error']:.1%} -> "
                      f"{a['median_abs_error']:.1%}, max {b['max_abs_error']:.1%} -> "
                      f"{a['max_abs_error']:.1%}")
        if doc["underdetermined"]:
            console.print("fewer cases than free parameters: the fit is underdetermined")
        if args.out:
            console.print(f"-> {args.out}")
    return 0
