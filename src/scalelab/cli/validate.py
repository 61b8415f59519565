"""``scalelab validate``: run a grid of configurations, each predicted first, and compare."""

from __future__ import annotations

import json
import sys

from scalelab.cli._common import add_workload_options, positive_int, workload_from_args

EPILOG = """examples:
  scalelab validate scalelab.toys:alexnet_like --input-shape 3,32,32 --num-classes 10 \\
      --grid "workers=2,4 ps=1,2 rate=300mbit batch_size=8" --steps 8 --plot validation.png
  scalelab validate resnet18 --input-shape 3,64,64 --grid "workers=2 architecture=ps,allreduce"
  scalelab validate alexnet --input-shape 3,64,64 \\
      --grid "workers=2 ps=2 partition=balanced,tensor rate=1gbit" --calibration calibration.json

grid keys (scalelab run option names): workers, ps, architecture, partition, batch_size, rate,
ps_placement (dedicated, or colocated: server k on worker host k mod W, any count).
Values are comma-separated; every combination is a case. `rate` emulates the network (one
network namespace per host, links shaped with tc tbf; needs root); without it ranks talk
over loopback. Error = (predicted - measured) / measured median step time.
"""


def register(subparsers) -> None:
    from scalelab.cli import HelpFormatter

    p = subparsers.add_parser(
        "validate", help="predict a grid of runs, run them, and report the prediction error",
        description="For each configuration of --grid: predict the step with the planner from "
        "a profile, the measured contention and the measured link of this machine, then run "
        "it for real and measure. Writes validation.json (scalelab.validation/1).",
        epilog=EPILOG, formatter_class=HelpFormatter)
    add_workload_options(p)
    p.add_argument("--grid", required=True, metavar="SPEC",
                   help='e.g. "workers=2,4 ps=1,2 architecture=ps,allreduce rate=200mbit"')
    p.add_argument("--steps", type=positive_int, default=10, metavar="N",
                   help="training steps per run (default 10)")
    p.add_argument("--warmup-steps", type=int, default=2, metavar="N",
                   help="steps left out of the medians (default 2)")
    p.add_argument("--profile-steps", type=positive_int, default=5, metavar="N",
                   help="timed steps of each profile and contention measurement (default 5)")
    p.add_argument("--calibration", default=None, metavar="FILE",
                   help="scalelab.calibration/1: also predict with its parameters and report "
                   "the error on the cases it was not fitted on")
    p.add_argument("--reuse-profiles", action="store_true",
                   help="time compute and contention once per batch size and worker count, "
                   "not before every case (faster; load changes between cases go unseen)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="seconds any wait in a run may take (default 120)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--algorithm", default="default", metavar="NAME",
                   help="computation configuration every run and every compute timing uses, "
                   "as `scalelab run --algorithm` takes it (e.g. channels_last)")
    p.add_argument("--out", default="validation.json", help="default validation.json")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="predicted vs measured (y = x) and speedup against workers")
    p.add_argument("--quiet", action="store_true", help="no progress lines or table")
    p.add_argument("--json", action="store_true", help="print validation.json to stdout")
    p.set_defaults(func=run)


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1e3:.1f}"


def table(validation: dict):
    from rich.table import Table

    from scalelab.experiment.validate import describe_config

    cal = "calibration" in validation
    t = Table(title="scalelab validate (times in ms per step)")
    for col in ("case", "step pred", "step meas", "error", "comp pred", "comp meas",
                "exch pred", "exch meas", "bound"):
        t.add_column(col, justify="left" if col in ("case", "bound") else "right")
    if cal:
        t.add_column("calibrated", justify="right")
    for c in validation["cases"]:
        row = [describe_config(c["config"]).replace("=", ""), _ms(c["predicted_step_s"]),
               _ms(c["measured_step_s"]), f"{c['error']:+.1%}", _ms(c["predicted_compute_s"]),
               _ms(c["measured_compute_s"]), _ms(c["predicted_exchange_s"]),
               _ms(c["measured_exchange_s"]),
               c["bottleneck"].replace("network-", "net-")]
        if cal:
            mark = " fit" if c.get("used_for_fitting") else ""
            row.append(f"{c['calibrated_error']:+.1%}{mark}")
        t.add_row(*row)
    return t


def summary_lines(validation: dict) -> list[str]:
    from scalelab.text import plural
    from scalelab.theory.units import Bps_to_mbps

    lines = []
    for name, link in validation["link"].items():
        lines.append(f"link {name}: {Bps_to_mbps(link['bandwidth_Bps']):.1f} Mbit/s measured, "
                     f"latency {link['latency_s'] * 1e6:.0f} us")
    lines.append(f"|error| of the step time: median {validation['median_abs_error']:.1%}, "
                 f"max {validation['max_abs_error']:.1%} "
                 f"({plural(len(validation['cases']), 'case')})")
    cal = validation.get("calibration")
    if cal:
        if cal.get("model"):
            lines.append(f"calibration: the {cal['model']} model"
                         + (f" ({cal['reason']})" if cal.get("reason") else ""))
        b, a = cal["held_out_before"], cal["held_out_after"]
        if b["cases"]:
            lines.append(f"cases not used for fitting ({b['cases']}): median |error| "
                         f"{b['median_abs_error']:.1%} -> {a['median_abs_error']:.1%} "
                         f"calibrated, max {b['max_abs_error']:.1%} -> {a['max_abs_error']:.1%}")
        else:
            lines.append("every case was used for fitting the calibration: no held-out error")
        band = cal.get("band")
        if band:
            lines.append(f"band x{band['low']:.3f} .. x{band['high']:.3f} of the calibrated "
                         f"prediction: {cal.get('inside_band', 0)} of "
                         f"{len(validation['cases'])} measured steps inside")
    return lines


def run(args) -> int:
    from scalelab.cli._common import console, err_console
    from scalelab.experiment.calibrate import Calibration
    from scalelab.experiment.validate import ValidationOptions, parse_grid, run_validation
    from scalelab.report.figures import plot_validation
    from scalelab.results import read_json, write_json

    spec = workload_from_args(args)
    grid = parse_grid(args.grid)
    options = ValidationOptions(steps=args.steps, warmup_steps=args.warmup_steps,
                                profile_steps=args.profile_steps, timeout_s=args.timeout,
                                seed=args.seed, algorithm=args.algorithm,
                                fresh_profiles=not args.reuse_profiles)
    calibration = (Calibration.from_dict(read_json(args.calibration, "calibration"),
                                         str(args.calibration))
                   if args.calibration else None)
    if args.plot and not args.plot.lower().endswith(".png"):
        from scalelab.errors import UsageError

        raise UsageError(f"--plot {args.plot}: the figure is written as PNG (FILE.png)")
    loud = not args.quiet and not args.json

    def say(msg: str) -> None:
        if loud:
            err_console.print(f"[dim]{msg}[/dim]")

    result = run_validation(spec, grid, options, calibration=calibration, say=say).to_dict()
    if args.out:
        write_json(args.out, "validation", result)
    if args.plot:
        plot_validation(result, args.plot)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    elif not args.quiet:
        console.print(table(result))
        for line in summary_lines(result):
            console.print(line)
        if args.out:
            console.print(f"-> {args.out}" + (f", {args.plot}" if args.plot else ""))
    return 0
