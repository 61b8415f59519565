"""``scalelab compare``: naive against recommended, one recommendation at a time, measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from scalelab.cli._common import add_workload_options, positive_int, workload_from_args

EPILOG = """examples:
  scalelab compare scalelab.toys:wide_fc --input-shape 3,16,16 --num-classes 10 \\
      --workers 2 --rate 100mbit --steps 4 --batch-sizes 16,64
  scalelab compare resnet18 --input-shape 3,32,32 --num-classes 10 --workers 2 --rate 1gbit \\
      --out compare.json --plot compare.png
  scalelab compare alexnet --input-shape 3,64,64 --workers 2 --rate 1gbit --baseline base.toml
  python -m scalelab.imagefolder imgs --images 512 --size 160 --classes 4
  scalelab compare resnet18 --input-shape 3,32,32 --num-classes 4 --workers 2 --data imgs
  scalelab report compare.json --out report.html

baseline (the start, unadvised; a --baseline TOML file overrides any of these keys):
  batch_size = 16         # per worker
  ps = 1                  # parameter servers
  partition = "tensor"    # whole tensors placed greedily (or "balanced")
  algorithm = "default"   # computation configuration
  loader_workers = 0

steps, in the paper's order, each predicted and trained: baseline; batch+algorithm; loaders;
servers; balanced shards (the last one is named recommended). A recommendation the
configuration already has is skipped. Without --rate the runs use loopback. With --data
the profile times the input pipeline, the baseline decodes in each worker (loader_workers 0)
and the loaders step runs the plan's loader processes per worker.
"""


def register(subparsers) -> None:
    from scalelab.cli import HelpFormatter

    p = subparsers.add_parser(
        "compare", help="measure naive against recommended, one recommendation at a time",
        description="Profile MODEL, plan for W workers on the measured link, then predict and "
        "train the baseline and each recommendation applied in turn; report samples/s, "
        "speedup over the baseline and predicted against measured.",
        epilog=EPILOG, formatter_class=HelpFormatter)
    add_workload_options(p)
    p.add_argument("--workers", type=int, required=True, metavar="W",
                   help="data-parallel workers (>= 2)")
    p.add_argument("--rate", default=None, metavar="RATE",
                   help="emulate a network of links shaped to RATE (e.g. 100mbit, 1gbit)")
    p.add_argument("--data", default=None, metavar="PATH",
                   help="image folder (PATH/<class>/<image>) to profile and train on; the "
                   "loader step is then run (synthetic data by default)")
    p.add_argument("--baseline", default=None, metavar="FILE",
                   help="TOML overriding the baseline's keys (see below)")
    p.add_argument("--steps", type=positive_int, default=8, metavar="N",
                   help="training steps per configuration (default 8)")
    p.add_argument("--warmup-steps", type=int, default=2, metavar="N",
                   help="steps left out of the medians (default 2)")
    p.add_argument("--batch-sizes", default="16,32,64,128", metavar="B,B,...",
                   help="batch sizes the profile times (default 16,32,64,128)")
    p.add_argument("--layout", choices=["ddp", "zero1", "zero2", "zero3"], default=None,
                   help="model-state layout the plan is asked for (as plan --layout); a "
                   "sharded recommendation is trained with --architecture fsdp --zero N "
                   "(default: the plan's own choice)")
    p.add_argument("--algorithm", default="default", metavar="NAME",
                   help="computation configuration every timing and run trains in, as "
                   "`scalelab run --algorithm` takes it (e.g. channels_last)")
    p.add_argument("--no-ablation", action="store_true",
                   help="only the baseline and the recommended configuration")
    p.add_argument("--reuse-profiles", action="store_true",
                   help="time compute and contention once per batch size, not before every "
                   "step (faster; load changes between steps go unseen)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="seconds any wait of a run may take (default 120)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="compare.json", help="compare.json path")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="bars of samples/s per step, predicted beside measured")
    p.add_argument("--quiet", action="store_true", help="no progress or table")
    p.add_argument("--json", action="store_true", help="print compare.json to stdout")
    p.set_defaults(func=run)


def _batch_sizes(text: str) -> tuple[int, ...]:
    from scalelab.errors import UsageError

    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--batch-sizes: not a list of integers: {text!r}") from None
    if not sizes or any(b < 1 for b in sizes):
        raise UsageError(f"--batch-sizes: sizes must be >= 1, got {text!r}")
    return sizes


def print_table(console, t) -> None:
    """Print ``t`` whole: when the output is not a terminal (piped), as wide as it needs."""
    from rich.measure import Measurement

    if console.is_terminal:
        console.print(t)
        return
    need = Measurement.get(console, console.options.update_width(1000), t).maximum
    width = console.width
    console.width = max(width, need)
    try:
        console.print(t)
    finally:
        console.width = width


def table(result: dict):
    from rich.table import Table

    from scalelab.text import plural

    t = Table(title=f"scalelab compare: {result['model']}, {plural(result['workers'], 'worker')}, "
                    f"{result.get('rate') or 'loopback'}")
    for name, just in (("step", "left"), ("batch", "right"), ("ps", "right"),
                       ("shards", "left"), ("loaders", "right"), ("pred/s", "right"),
                       ("meas/s", "right"),
                       ("speedup", "right"), ("pred", "right"), ("error", "right")):
        t.add_column(name, justify=just, no_wrap=True)
    t.caption = ("samples/s predicted and measured; speedup measured over the baseline, pred "
                 "the predicted one; error (predicted - measured)/measured")
    real = bool((result.get("options") or {}).get("data"))
    for s in result["steps"]:
        c = s["config"]
        sharded = c.get("architecture") == "fsdp"
        t.add_row(s["name"], str(c["batch_size"]), "-" if sharded else str(c["ps"]),
                  f"ZeRO-{c.get('zero')}" if sharded else c["partition"],
                  str(c.get("loader_workers", 0)) if real else "-",
                  f"{s['predicted_samples_per_s']:,.1f}", f"{s['measured_samples_per_s']:,.1f}",
                  f"{s['speedup']:.2f}x", f"{s['predicted_speedup']:.2f}x",
                  f"{s['error']:+.1%}")
    return t


def run(args) -> int:
    from scalelab.cli._common import console, err_console
    from scalelab.experiment.compare import (
        CompareOptions,
        baseline_config,
        compare,
        load_baseline,
    )
    from scalelab.results import write_json, write_text_atomic

    base = load_baseline(args.baseline) if args.baseline else baseline_config()
    options = CompareOptions(workers=args.workers, rate=args.rate, baseline=base,
                             steps=args.steps, warmup_steps=args.warmup_steps,
                             batch_sizes=_batch_sizes(args.batch_sizes),
                             one_at_a_time=not args.no_ablation, timeout_s=args.timeout,
                             seed=args.seed, fresh_profiles=not args.reuse_profiles,
                             data=args.data, layout=args.layout, algorithm=args.algorithm)
    spec = workload_from_args(args)
    if args.plot and not args.plot.lower().endswith(".png"):
        from scalelab.errors import UsageError

        raise UsageError(f"--plot {args.plot}: the figure is a PNG (name it FILE.png)")
    show = not args.quiet and not args.json
    result = compare(spec, options,
                     progress=(lambda text: err_console.print(f"[dim]{text}[/dim]"))
                     if show else None).to_dict()
    if args.out:
        write_json(args.out, "compare", result)
    if args.plot:
        from scalelab.report import figures

        png = figures.compare([result])
        if png:
            write_text_atomic(Path(args.plot), png)
    if args.json:
        print(json.dumps(result, indent=2))
    elif not args.quiet:
        from scalelab.theory.units import Bps_to_mbps

        print_table(console, table(result))
        for s in result["skipped"]:
            console.print(f"skipped {s['name']}: {s['reason']}")
        for n in result["notes"]:
            console.print(f"note: {n}")
        link = result["link"]
        console.print(f"link {Bps_to_mbps(link['bandwidth_Bps']):,.1f} Mbit/s measured, latency "
                      f"{link['latency_s'] * 1e6:.0f} us" + (f"  -> {args.out}" if args.out
                                                            else ""), highlight=False)
    sys.stdout.flush()
    return 0
