"""``scalelab profile MODEL``: benchmark one device."""

from __future__ import annotations

import json

EPILOG = """examples:
  scalelab profile resnet18 --input-shape 3,64,64 --batch-sizes 2,4
  scalelab profile resnet50 --device cuda --memory-budget 70GiB --out r50.json
  scalelab profile resnet18 --device cuda:1 --steps 10
  scalelab profile scalelab.toys:smallconv --input-shape 3,32,32 --num-classes 10
  scalelab profile resnet18 --data ./images --batch-sizes 32
"""


def register(sub) -> None:
    from scalelab.cli import HelpFormatter
    from scalelab.cli._common import add_workload_options, bytes_arg, positive_int

    p = sub.add_parser("profile", help="benchmark one device: step, memory, batch, algorithms",
                       description="Time the training step of MODEL on this device, find the "
                                   "largest batch that fits and the batch worth using, compare "
                                   "computation configurations, and time the input pipeline.",
                       epilog=EPILOG, formatter_class=HelpFormatter)
    add_workload_options(p)
    p.add_argument("--device", default="cpu", metavar="cpu|cuda|cuda:N",
                   help="cpu (default), cuda (the GPU of LOCAL_RANK, else the current one) "
                        "or cuda:N")
    p.add_argument("--batch-sizes", default="auto", metavar="auto|B1,B2,...",
                   help="auto (search) or a list of batch sizes (default auto)")
    p.add_argument("--memory-budget", type=bytes_arg, default=None, metavar="SIZE",
                   help="peak memory allowed, e.g. 8GiB (default: the device's memory less "
                        "10%%; on CPU the memory available now)")
    p.add_argument("--max-batch", type=int, default=None, metavar="B",
                   help="largest batch the auto search tries (default 256 on CPU, 4096 on CUDA)")
    p.add_argument("--data", default="synthetic", metavar="synthetic|PATH",
                   help="synthetic inputs, or an image folder (class sub-folders) to time I/O")
    p.add_argument("--algorithms", choices=["auto", "none"], default="auto",
                   help="auto: compare computation configurations at the recommended "
                        "batch (on CUDA: default = PyTorch's defaults, TF32 convolutions and "
                        "FP32 matmuls; fp32_strict; tf32; cudnn_benchmark; channels_last; "
                        "bf16/fp16 autocast, fp16 with loss scaling); none: default only "
                        "(default auto)")
    p.add_argument("--steps", type=positive_int, default=5,
                   help="timed steps per trial (default 5; fewer is noted in the output; at "
                        "least 3 on CUDA)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up steps per trial (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="profile.json", help="output file (default profile.json)")
    p.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=run)


def summary_table(prof: dict):
    from rich.table import Table

    w = prof["workload"]
    seq = w.get("tokens_per_sample") or 0  # a language model: samples are sequences
    per = f"sequence of {seq} tokens" if seq else "sample"
    t = Table(title=f"{w['model']} on {prof['environment'].get('device_name', prof['device'])}",
              caption=f"{w['param_count']:,} parameters, {w['param_bytes'] / 2**20:.1f} MiB "
                      f"of gradients, {w['flops_per_sample'] / 1e9:.2f} GFLOP per {per}")
    for col in ("batch", "fwd ms", "bwd ms", "opt ms", "step ms", "± ms", "samples/s",
                *(("tokens/s",) if seq else ()), "peak MiB"):
        t.add_column(col, justify="right")
    for r in prof["batches"]:
        mark = " *" if r["batch_size"] == prof["recommended_batch_size"] else ""
        t.add_row(f"{r['batch_size']}{mark}", *(f"{r[k] * 1e3:.1f}" for k in
                  ("forward_s", "backward_s", "optimizer_s", "step_s", "step_s_spread")),
                  f"{r['samples_per_s']:.1f}",
                  *((f"{r['samples_per_s'] * seq:,.0f}",) if seq else ()),
                  f"{r['peak_memory_bytes'] / 2**20:.0f}")
    return t


def algorithm_table(prof: dict):
    from rich.table import Table

    a = prof["algorithms"]
    t = Table(title=f"computation configurations at batch {a.get('batch_size')}")
    for col in ("configuration", "step", "peak memory", "fits"):
        t.add_column(col, justify="left" if col == "configuration" else "right")
    for c in a["candidates"]:
        t.add_row(c["name"] + (" (chosen)" if c["name"] == a["chosen"] else ""),
                  f"{c['step_s'] * 1e3:.1f} ms" if c.get("step_s") else "-",
                  f"{c['peak_memory_bytes'] / 2**20:.0f} MiB" if c.get("peak_memory_bytes")
                  else "-", "yes" if c["fits"] else "no")
    return t


def trial_progress(opts, input_dims: int, label: str):
    """``with trial_progress(...) as say``: one line per trial on stdout where it is not a
    terminal, a bar on stderr where it is (:mod:`scalelab.progress`)."""
    from contextlib import nullcontext

    from scalelab.cli._common import console, err_console
    from scalelab.profiler.algorithms import candidates
    from scalelab.progress import TrialProgress, bar, expected_trials

    configs = len(candidates(opts.device, input_dims)) if opts.algorithms == "auto" else 1
    n = expected_trials(opts.batch_sizes, opts.max_batch, configs, opts.data != "synthetic")
    if console.is_terminal:
        return bar(err_console, n, label)
    return nullcontext(TrialProgress(n, emit=lambda line: print(line, flush=True)))


def run(args) -> int:
    from scalelab.cli._common import console, err_console, workload_from_args
    from scalelab.profiler import ProfileOptions, run_profile
    from scalelab.results import write_json

    spec = workload_from_args(args)  # bad models and input shapes fail here, before measuring
    opts = ProfileOptions(device=args.device, batch_sizes=args.batch_sizes,
                          memory_budget_bytes=args.memory_budget, data=args.data,
                          algorithms=args.algorithms, warmup=args.warmup, steps=args.steps,
                          max_batch=args.max_batch, seed=args.seed)
    if args.quiet or args.json:
        prof = run_profile(spec, opts)
    else:
        with trial_progress(opts, len(spec.input_shape), f"profiling {spec.model}") as say:
            prof = run_profile(spec, opts, progress=say)
    path = write_json(args.out, "profile", prof)
    if args.json:
        print(json.dumps({"schema": "scalelab.profile/1", **prof}, indent=2))
    elif not args.quiet:
        console.print(summary_table(prof))
        console.print(algorithm_table(prof))
        io = prof["io"]
        if io["source"] != "synthetic":
            console.print(f"input pipeline: {io['load_s_per_batch'] * 1e3:.1f} ms per batch "
                          f"in one process; {io['loader_workers_needed']} loader process(es) "
                          "hide it behind the step")
        console.print(f"largest batch that fits: {prof['max_batch_size']}"
                      f"{' (search cap reached)' if prof['max_batch_capped'] else ''}; "
                      f"recommended batch: {prof['recommended_batch_size']} (* above: smallest "
                      f"within 5% of the best throughput); computation: "
                      f"{prof['algorithms']['chosen']}")
        for u in prof.get("untrainable_batches", []):
            console.print(f"note: {u['reason']} (passed over)", highlight=False)
        for w in prof.get("warnings", []):
            err_console.print(f"[yellow]warning:[/yellow] {w}")
        console.print(f"profile written to [bold]{path}[/bold]")
    return 0
