"""``scalelab run``: real parameter-server or all-reduce training, every phase timed."""

from __future__ import annotations

import argparse
import os

from scalelab.cli import HelpFormatter
from scalelab.cli._common import add_workload_options, bytes_arg, positive_int, workload_from_args

EXAMPLES = """\
examples:
  scalelab run resnet18 --input-shape 3,32,32 --num-classes 10 --workers 2 --ps 1 \\
      --batch-size 16 --steps 20 --out run.json
  scalelab run resnet18 --input-shape 3,32,32 --workers 2 --architecture allreduce --out ddp.json
  scalelab run resnet18 --input-shape 3,32,32 --workers 2 --ps 2 --mode async --steps 30
  scalelab run resnet18 --input-shape 3,32,32 --workers 2 --colocate --piece-size 1MiB
  scalelab run alexnet --input-shape 3,64,64 --workers 2 --ps 2 --partition tensor \\
      --checkpoint-dir ckpt --checkpoint-every 5 --steps 20   # then add --resume
  torchrun --nnodes 2 --nproc-per-node 2 --node-rank 0 --master-addr 10.0.0.1 \\
      --master-port 29500 -m scalelab run resnet50 --workers 2 --colocate \\
      --launcher torchrun --out run.json
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="train data-parallel for real (parameter server or DDP) and time it",
        description="Train MODEL with W workers on torch.distributed (Gloo) and measure the "
                    "data wait, forward+backward, push, server apply, pull and step time.",
        epilog=EXAMPLES, formatter_class=HelpFormatter)
    add_workload_options(p)
    p.add_argument("--workers", type=int, required=True, metavar="W")
    p.add_argument("--ps", type=int, default=None, metavar="P",
                   help="parameter servers (default 1, or W with --colocate)")
    p.add_argument("--architecture", choices=["ps", "allreduce"], default="ps")
    p.add_argument("--mode", choices=["sync", "async"], default="sync")
    p.add_argument("--batch-size", type=positive_int, default=32, metavar="b",
                   help="per-worker minibatch (default 32)")
    p.add_argument("--steps", type=positive_int, default=20, metavar="N")
    p.add_argument("--warmup-steps", type=int, default=2, metavar="N",
                   help="steps left out of the statistics (default 2)")
    p.add_argument("--partition", choices=["balanced", "tensor"], default="balanced")
    p.add_argument("--piece-size", type=bytes_arg, default=None, metavar="BYTES",
                   help="cut shards into messages of at most this size (e.g. 1MiB)")
    p.add_argument("--no-overlap", action="store_true",
                   help="push gradients after backward instead of as each one is ready")
    p.add_argument("--colocate", action="store_true",
                   help="a server on every worker host (P = W)")
    p.add_argument("--emulate-network", metavar="RATE", default=None,
                   help="run every host in its own network namespace shaped to RATE (1gbit)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds any wait may take before the run fails (default 60)")
    p.add_argument("--checkpoint-dir", metavar="D")
    p.add_argument("--checkpoint-every", type=positive_int, metavar="K")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", metavar="PATH", help="image folder (ImageFolder layout)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads per rank (default: cores / ranks)")
    p.add_argument("--launcher", choices=["local", "torchrun"], default="local")
    p.add_argument("--out", metavar="run.json", default=None)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print run.json to stdout")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace):
    from scalelab.runner import RunConfig

    log_dir = None
    if args.out:
        base, _ = os.path.splitext(args.out)
        log_dir = base + ".ranks"
    return RunConfig(
        workload=workload_from_args(args), workers=args.workers, ps=args.ps,
        architecture=args.architecture, mode=args.mode, batch_size=args.batch_size,
        steps=args.steps, warmup_steps=args.warmup_steps, partition=args.partition,
        piece_bytes=args.piece_size, colocate=args.colocate,
        emulate_network=args.emulate_network, timeout_s=args.timeout,
        checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
        resume=args.resume, seed=args.seed, data=args.data, launcher=args.launcher,
        threads=args.threads, overlap=not args.no_overlap, log_dir=log_dir,
    )


def _print_summary(out: dict) -> None:
    from rich.table import Table

    from scalelab.cli._common import console

    t = Table(title="scalelab run", show_header=True)
    for col in ("phase", "median s", "p10 s", "p90 s"):
        t.add_column(col, justify="right" if col != "phase" else "left")
    for ph, v in out["steps"].items():
        if v:
            t.add_row(ph, f"{v['median']:.4f}", f"{v['p10']:.4f}", f"{v['p90']:.4f}")
    console.print(t)
    sps = out.get("samples_per_s")
    bw = out.get("achieved_bandwidth_Bps")
    console.print(f"samples/s {sps:.1f}" if sps else "samples/s -",
                  f"  exchange bandwidth {bw / 1e6:.1f} MB/s" if bw else "",
                  f"  final_param_checksum {out['final_param_checksum']:.10g}")


def run(args: argparse.Namespace) -> int:
    import json

    from scalelab.results import write_json
    from scalelab.runner import run_training

    config = config_from_args(args)
    if config.launcher == "torchrun":
        return _run_torchrun(config, args)
    if args.quiet or args.json:
        out = run_training(config)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        from scalelab.cli._common import err_console

        with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[info]}"), console=err_console,
                      transient=True) as bar:
            task = bar.add_task("run", total=config.steps - config.start_step, info="")

            def progress(done, total, line):
                bar.update(task, completed=done, total=total,
                           info=f"step {line.get('step_s', 0):.3f} s")

            out = run_training(config, progress=progress)
    if args.out:
        write_json(args.out, "run", out)
    if args.json:
        print(json.dumps(out, indent=2))
    elif not args.quiet:
        _print_summary(out)
    return 0


def _run_torchrun(config, args) -> int:
    from scalelab.errors import RunFailure, UsageError
    from scalelab.results import write_json
    from scalelab.runner import prepare
    from scalelab.runner.entry import describe_failure, rank_main
    from scalelab.runner.launch import torchrun_env

    rank, world = torchrun_env()
    if world != config.world_size:
        raise UsageError(
            f"torchrun world size {world} does not match the roles: {config.workers} workers + "
            f"{config.ps} servers = {config.world_size} ranks"
        )
    config = prepare(config)
    try:
        out = rank_main(config, rank, world, config.log_dir)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - one line naming this rank
        info = describe_failure(config, rank, e)
        raise RunFailure(f"{info['where']} failed: {info['error']}") from None
    if out is not None and args.out:
        write_json(args.out, "run", out)
    if out is not None and not args.quiet:
        _print_summary(out)
    return 0
