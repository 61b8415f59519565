"""``scalelab calibrate``: fit the step model to measured runs, kept only if it predicts better."""

from __future__ import annotations

import json
import sys

EPILOG = """examples:
  scalelab validate MODEL --grid "workers=2 ps=1,2 rate=300mbit" --out small.json
  scalelab calibrate small.json --out calibration.json
  scalelab validate MODEL --grid "workers=4 ps=1,2 rate=300mbit" --calibration calibration.json
  scalelab calibrate run-w2.json run-w4.json --free bandwidth_efficiency,latency_s
  scalelab plan --profile profile.json --cluster cluster.toml --calibration calibration.json

Reads validation.json files (every case) and run.json files of synchronous parameter-server
runs on an emulated network (--emulate-network). Fits only the parameters the cases
constrain (compute factor, bandwidth efficiency, overlap, per-message latency, server apply
time per byte), each from a prior at its uncalibrated value within physical bounds, with
its uncertainty. Cross-validation (k-fold, leave-one-out for few cases) decides whether the
calibrated model replaces the uncalibrated one; the file records both held-out errors, the
decision, and the band of measured/predicted step times of the model chosen.
"""


def register(subparsers) -> None:
    from scalelab.cli import HelpFormatter

    p = subparsers.add_parser(
        "calibrate", help="fit the model's free parameters to measured runs",
        description="Fit what the cases constrain of compute factor, bandwidth efficiency, "
        "overlap, latency and apply time to run/validation files, judge the fit on held-out "
        "cases; writes scalelab.calibration/1.",
        epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("files", nargs="+", metavar="RUN_OR_VALIDATION_FILE")
    p.add_argument("--out", default="calibration.json", help="default calibration.json")
    p.add_argument("--free", default=None, metavar="P1,P2",
                   help="parameters that may be fitted (default all: compute_scale, "
                   "bandwidth_efficiency, overlap, latency_s, apply_s_per_byte); the others "
                   "keep their prior")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true", help="print calibration.json to stdout")
    p.set_defaults(func=run)


def table(doc: dict):
    from rich.table import Table

    from scalelab.text import plural

    t = Table(title=f"scalelab calibrate ({plural(len(doc['fitted_cases']), 'case')})")
    for col, just in (("parameter", "left"), ("fitted", "right"), ("± 1 sd", "right"),
                      ("prior", "right"), ("why", "left")):
        t.add_column(col, justify=just)
    for name, p in doc["parameters"].items():
        t.add_row(name, f"{p['value']:.4g}" if p["fitted"] else "-",
                  f"{p['std']:.2g}" if p["std"] is not None else "-", f"{p['prior']:.4g}",
                  p["reason"])
    return t


def summary_lines(doc: dict) -> list[str]:
    b, a = doc["before"], doc["after"]
    lines = [f"|error| on the fitted cases: median {b['median_abs_error']:.1%} -> "
             f"{a['median_abs_error']:.1%}, max {b['max_abs_error']:.1%} -> "
             f"{a['max_abs_error']:.1%}",
             f"model used: {doc['model']} ({doc['decision']['reason']})"]
    band = doc.get("band")
    if band:
        from scalelab.text import plural

        lines.append(f"band: measured step within x{band['low']:.3f} .. x{band['high']:.3f} "
                     f"of predicted ({band['source']}, {plural(band['cases'], 'case')})")
    return lines


def run(args) -> int:
    from scalelab.cli._common import console
    from scalelab.experiment.calibrate import calibrate, load_observations
    from scalelab.results import write_json

    free = tuple(s.strip() for s in args.free.split(",") if s.strip()) if args.free else None
    if free is not None and not free:
        from scalelab.errors import UsageError

        raise UsageError("--free names no parameter")
    obs = load_observations(args.files)
    doc = calibrate(obs, free, sources=tuple(str(f) for f in args.files)).to_dict()
    if args.out:
        write_json(args.out, "calibration", doc)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
    elif not args.quiet:
        console.print(table(doc))
        for line in summary_lines(doc):
            console.print(line, highlight=False)
        if args.out:
            console.print(f"-> {args.out}")
    return 0
