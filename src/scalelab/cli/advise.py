"""``scalelab advise MODEL``: profile (cached) -> plan -> report, in one command."""

from __future__ import annotations

import json

EPILOG = """examples:
  scalelab advise resnet18 --input-shape 3,64,64 --out scalelab-out
  scalelab advise resnet50 --cluster examples/cluster-4x8-a100-100gbe.toml --out r50
  scalelab advise alexnet --input-shape 3,64,64 --check --fresh

Without --cluster the plan covers this machine (when it has several GPUs) and the example
clusters in examples/. Profiles are cached (SCALELAB_CACHE, default ~/.cache/scalelab) by
model, input shape, classes, optimizer, device and torch version; --fresh measures again.
"""


def register(sub) -> None:
    from scalelab.cli import HelpFormatter
    from scalelab.cli._common import add_workload_options, bytes_arg

    p = sub.add_parser("advise", help="the main job: profile, plan and report in one command",
                       description="Profile MODEL on this device (cached), plan data-parallel "
                                   "training for a cluster, and write an HTML report.",
                       epilog=EPILOG, formatter_class=HelpFormatter)
    add_workload_options(p)
    p.add_argument("--cluster", action="append", default=[], metavar="FILE",
                   help="cluster.toml to plan for (repeatable; default: the examples)")
    p.add_argument("--out", default="scalelab-out", metavar="DIR",
                   help="folder for report.html and the JSON files (default scalelab-out)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--batch-sizes", default="auto", metavar="auto|B1,B2,...")
    p.add_argument("--memory-budget", type=bytes_arg, default=None, metavar="SIZE")
    p.add_argument("--max-batch", type=int, default=None, metavar="B")
    p.add_argument("--data", default="synthetic", metavar="synthetic|PATH")
    p.add_argument("--target-efficiency", type=float, default=0.8)
    p.add_argument("--fresh", action="store_true", help="profile again, ignoring the cache")
    p.add_argument("--check", action="store_true",
                   help="run the recommended setup for a few real steps on this machine")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=run)


def run(args) -> int:
    from scalelab.advise import AdviseOptions, advise
    from scalelab.cli._common import console, err_console, workload_from_args
    from scalelab.profiler import ProfileOptions

    spec = workload_from_args(args)
    popts = ProfileOptions(device=args.device, batch_sizes=args.batch_sizes,
                           memory_budget_bytes=args.memory_budget, data=args.data,
                           max_batch=args.max_batch)
    opts = AdviseOptions(out_dir=args.out, clusters=args.cluster, fresh=args.fresh,
                         check=args.check, target_efficiency=args.target_efficiency,
                         profile=popts)
    if args.quiet or args.json:
        result = advise(spec, opts)
    else:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=err_console, transient=True) as bar:
            task = bar.add_task("starting", total=None)
            result = advise(spec, opts, progress=lambda t: bar.update(task, description=t))
    if args.json:
        print(json.dumps({"report": str(result.report), "files": [str(f) for f in result.files],
                          "profile_cached": result.profile_cached,
                          "recommendations": {p["inputs"]["cluster_name"]: p["recommendation"]
                                              for p in result.plans}}, indent=2))
        return 0
    if args.quiet:
        return 0
    from scalelab.cli.profile import algorithm_table, summary_table
    from scalelab.results import read_json

    prof = read_json(result.out_dir / "profile.json", "profile")
    console.print(summary_table(prof))
    console.print(algorithm_table(prof))
    head = f"advice for {spec.model}" + (" (cached profile)" if result.profile_cached else "")
    console.print(f"[bold]{head}[/bold]")
    for p in result.plans:
        r = p["recommendation"]
        servers = (f", {r['num_ps']} parameter servers (lemma minimum {r['num_ps_min']})"
                   if r["architecture"] == "ps" else "")
        console.print(
            f"  {p['inputs']['cluster_name']}: batch {r['batch_size']}/device, {r['algorithm']}, "
            f"{r['architecture']} on {r['gpus']} devices{servers}: "
            f"{r['samples_per_s']:,.0f} samples/s at efficiency {r['efficiency']:.2f}; "
            f"network needed {r['network_gbps_needed']:.3g} Gb/s", highlight=False)
    if result.run:
        console.print(f"check run on this machine: {result.run.get('samples_per_s', 0):.1f} "
                      "samples/s measured")
    console.print(f"report: [bold]{result.report}[/bold]")
    return 0
