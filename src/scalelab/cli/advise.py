"""``scalelab advise MODEL``: profile (cached) -> plan -> report, in one command."""

from __future__ import annotations

import json

EPILOG = """examples (from any folder: --cluster takes a file or a shipped example's name):
  scalelab advise resnet18 --input-shape 3,64,64 --out scalelab-out
  scalelab advise resnet50 --cluster cluster-4x8-a100-100gbe --out r50
  scalelab advise alexnet --input-shape 3,64,64 --check --fresh

Without --cluster the plan covers this machine (when it has several GPUs) and the shipped
example clusters:
  {examples}
Profiles are cached (SCALELAB_CACHE, default ~/.cache/scalelab) by model, input, classes,
optimizer, device, torch version and every profiling option; a profile measured on a busy
machine is not cached; --fresh measures again.
--check runs the recommendation's architecture and batch at the largest worker count this
machine hosts, beside the model's prediction for that run: a check of the model here, not
a validation of the cluster plan.
"""


def register(sub) -> None:
    from scalelab.cli import HelpFormatter
    from scalelab.cli._common import add_workload_options, bytes_arg, positive_int
    from scalelab.paths import example_names

    p = sub.add_parser("advise", help="the main job: profile, plan and report in one command",
                       description="Profile MODEL on this device (cached), plan data-parallel "
                                   "training for a cluster, and write an HTML report.",
                       epilog=EPILOG.format(examples=" ".join(example_names()) or "none installed"),
                       formatter_class=HelpFormatter)
    add_workload_options(p)
    p.add_argument("--cluster", action="append", default=[], metavar="FILE|NAME",
                   help="cluster.toml, or a shipped example's name, to plan for (repeatable; "
                        "default: this machine when it has several GPUs, and the examples)")
    p.add_argument("--out", default="scalelab-out", metavar="DIR",
                   help="folder for report.html and the JSON files")
    p.add_argument("--device", default="cpu", metavar="cpu|cuda|cuda:N",
                   help="the device to profile")
    p.add_argument("--batch-sizes", default="auto", metavar="auto|B1,B2,...",
                   help="auto (search) or a list of batch sizes to profile")
    p.add_argument("--memory-budget", type=bytes_arg, default=None, metavar="SIZE",
                   help="peak memory allowed, e.g. 8GiB (default: the device's memory less 10%%)")
    p.add_argument("--max-batch", type=int, default=None, metavar="B",
                   help="largest batch the auto search tries (default 256 on CPU, 4096 on CUDA)")
    p.add_argument("--data", default="synthetic", metavar="synthetic|PATH",
                   help="synthetic inputs, or an image folder to time the input pipeline")
    p.add_argument("--algorithms", choices=["auto", "none"], default="auto",
                   help="compare computation configurations")
    p.add_argument("--steps", type=positive_int, default=5,
                   help="timed steps per profiling trial; fewer is noted in the output")
    p.add_argument("--target-efficiency", type=float, default=0.8,
                   help="the efficiency a recommended device count must keep")
    p.add_argument("--fresh", action="store_true", help="profile again, ignoring the cache")
    p.add_argument("--check", action="store_true",
                   help="check the model on this machine: run the recommendation scaled to "
                        "the cores (or GPUs) here, beside its prediction")
    p.add_argument("--check-steps", type=positive_int, default=6,
                   help="timed steps of the --check run")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=run, out_is_folder=True)


def recommendation_line(p: dict) -> str:
    """One plan's advice in one line: the cluster, then the report's headline
    (:func:`scalelab.plan.story.headline`; the alternatives follow on their own lines)."""
    from scalelab.plan.story import headline

    r = p["recommendation"]
    if p.get("kind") == "language-model":  # a parallel layout: its own line
        from scalelab.plan.lm.story import headline as lm_headline

        return f"  {p['inputs']['cluster_name']} ({cluster_text(p)}): {lm_headline(p)}"
    return (f"  {p['inputs']['cluster_name']} ({cluster_text(p)}): "
            f"{r['algorithm'] or 'default computation'}; {headline(p, alternatives=False)}")


def cluster_text(p: dict) -> str:
    """``4 nodes x 8 A100-SXM-80GB, 100GbE``: the cluster a plan is for."""
    from scalelab.report.cards import cluster_summary

    return cluster_summary(p)


def check_line(check: dict) -> str:
    from scalelab.text import format_s

    c = check["check"]
    ran = c["ran"]
    return (f"{c['label']}: ran {ran['architecture']} with {c['why']}, batch "
            f"{ran['batch_size']}, on loopback: predicted {c['predicted_samples_per_s']:,.1f} "
            f"samples/s (step {format_s(c['predicted_step_s'])}), measured "
            f"{c['measured_samples_per_s'] or 0:,.1f} samples/s (step "
            f"{format_s(c['measured_step_s'])}), step-time error {c['error'] * 100:+.1f}%")


def run(args) -> int:
    from scalelab.advise import AdviseOptions, advise, prepare
    from scalelab.cli._common import workload_from_args
    from scalelab.profiler import ProfileOptions

    spec = workload_from_args(args)
    popts = ProfileOptions(device=args.device, batch_sizes=args.batch_sizes,
                           memory_budget_bytes=args.memory_budget, data=args.data,
                           max_batch=args.max_batch, algorithms=args.algorithms,
                           steps=args.steps)
    opts = AdviseOptions(out_dir=args.out, clusters=args.cluster, fresh=args.fresh,
                         check=args.check, check_steps=args.check_steps,
                         target_efficiency=args.target_efficiency, profile=popts)
    ready = prepare(spec, opts)  # every option checked before the progress line starts
    # one line per trial where stdout is not a terminal, a bar where it is
    if args.quiet or args.json:
        result = advise(spec, opts, prepared=ready)
    else:
        from scalelab.cli.profile import trial_progress

        with trial_progress(popts, len(spec.input_shape), f"advising {spec.model}") as say:
            result = advise(spec, opts, progress=say, prepared=ready)
    if result.layout_advice is not None:
        return print_layout_advice(spec.model, result, args.json, args.quiet)
    if args.json:
        print(json.dumps({"report": str(result.report), "files": [str(f) for f in result.files],
                          "profile_cached": result.profile_cached,
                          "profile_note": result.profile_note, "warnings": result.warnings,
                          "recommendations": {p["inputs"]["cluster_name"]: p["recommendation"]
                                              for p in result.plans},
                          "check": (result.check or {}).get("check")}, indent=2))
        return 0
    if not args.quiet:
        print_advice(spec.model, result)
    return 0


def print_layout_advice(model: str, result, as_json: bool, quiet: bool) -> int:
    """A model no device of the profiling budget holds: the layout, devices and batch that
    fit, from its memory alone (nothing was measured, so no plan or report)."""
    from scalelab.cli._common import console

    fit = result.layout_advice
    if as_json:
        print(json.dumps({"layout_advice": fit, "warnings": result.warnings}, indent=2))
    elif not quiet:
        console.print(f"[bold]advice for {model}[/bold] (from its memory: no batch fits one "
                      "device, nothing measured)", highlight=False)
        console.print(f"  {fit['reason']}", highlight=False)
        console.print(f"  launch: {fit['launch']}", highlight=False, soft_wrap=True)
        for w in result.warnings:
            console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    return 0


def print_advice(model: str, result) -> None:
    from scalelab.cli._common import console
    from scalelab.cli.profile import algorithm_table, summary_table
    from scalelab.results import read_json

    prof = read_json(result.out_dir / "profile.json", "profile")
    console.print(summary_table(prof))
    console.print(algorithm_table(prof))
    head = f"advice for {model}" + (" (cached profile)" if result.profile_cached else "")
    console.print(f"[bold]{head}[/bold]")
    if result.profile_note:
        console.print(f"  profile: {result.profile_note}", highlight=False)
    from scalelab.report.cards import alternatives

    for p in result.plans:
        console.print(recommendation_line(p), highlight=False)
        # a step too small for the cluster has no throughput worth weighing
        lm = p.get("kind") == "language-model"
        for alt in () if p["recommendation"].get("too_small") or lm else alternatives(p):
            console.print(f"    or {alt}", highlight=False)
        if p["recommendation"].get("launch"):
            console.print(f"    launch: {p['recommendation']['launch']}", highlight=False,
                          soft_wrap=True)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    if result.check:
        console.print(check_line(result.check), highlight=False)
    console.print(f"report: [bold]{result.report}[/bold]")
