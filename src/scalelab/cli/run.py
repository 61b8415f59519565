"""``scalelab run``: real data-parallel training (parameter servers or DDP), measured."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from scalelab.cli._common import add_workload_options, bytes_arg, positive_int, workload_from_args

EPILOG = """examples:
  scalelab run resnet18 --input-shape 3,64,64 --num-classes 10 --workers 2 --ps 1 --steps 20
  scalelab run resnet18 --input-shape 3,64,64 --workers 2 --ps 2 --mode async
  scalelab run resnet18 --input-shape 3,64,64 --workers 2 --architecture allreduce
  scalelab run resnet18 --input-shape 3,64,64 --workers 2 --architecture fsdp --zero 2
  scalelab run resnet18 --input-shape 3,64,64 --workers 2 --architecture allreduce \
      --batch-size 8 --accumulation-steps 4 --recompute full
  scalelab run resnet50 --workers 1 --ps 1 --batch-size 32 --device cuda
  scalelab run resnet50 --workers 2 --architecture allreduce --algorithm channels_last+bf16_autocast
  scalelab run alexnet --input-shape 3,64,64 --workers 2 --ps 2 --partition tensor
  scalelab run resnet18 --input-shape 3,64,64 --workers 2 --data imgs --loader-workers 3
  scalelab run resnet18 --workers 2 --ps 1 --checkpoint-dir ckpt --checkpoint-every 10 --resume
  torchrun --nnodes 2 --nproc-per-node 2 --node-rank 0 --master-addr HOST --master-port 29500 \\
      -m scalelab run resnet18 --workers 2 --ps 2 --colocate --launcher torchrun
  scalelab run llama3-8b --layers 4 --seq-len 64 --workers 4 --tp 2 --pp 2 \\
      --accumulation-steps 4 --batch-size 1
  scalelab run gpt2 --layers 4 --seq-len 64 --workers 4 --tp 2 --architecture fsdp

ranks: workers are ranks 0..W-1 and servers W..W+P-1; with --colocate they alternate
(worker 0, server 0, worker 1, server 1, ...) so server k runs beside worker k.
"""


def register(subparsers) -> None:
    from scalelab.cli import HelpFormatter
    from scalelab.cli._run_parallel import add_parallel_options

    p = subparsers.add_parser(
        "run", help="train data-parallel for real (parameter servers or all-reduce) and measure",
        description="Train MODEL data-parallel on torch.distributed (Gloo; NCCL for all-reduce "
        "on GPUs) with sharded "
        "parameter servers (sync or async) or DDP, timing every phase of the step.",
        epilog=EPILOG, formatter_class=HelpFormatter)
    add_workload_options(p)
    p.add_argument("--workers", type=int, required=True, metavar="W", help="data-parallel workers")
    p.add_argument("--ps", type=int, default=None, metavar="P",
                   help="parameter servers (default 1, or W with --colocate)")
    p.add_argument("--architecture", choices=["ps", "allreduce", "fsdp"], default="ps",
                   help="fsdp: sharded data parallelism at the --zero level")
    p.add_argument("--zero", "--shard-level", dest="zero", type=int, choices=[1, 2, 3],
                   default=None, metavar="1|2|3",
                   help="with --architecture fsdp: 1 optimizer state sharded "
                   "(ZeroRedundancyOptimizer over DDP), 2 gradients too (FSDP2 without "
                   "resharding after forward), 3 parameters too (FSDP2 full shard; default)")
    p.add_argument("--mode", choices=["sync", "async"], default="sync")
    p.add_argument("--batch-size", type=positive_int, default=32, metavar="b",
                   help="per-worker minibatch (default 32)")
    p.add_argument("--accumulation-steps", type=positive_int, default=1, metavar="K",
                   help="micro-batches of --batch-size per exchange (gradient accumulation; "
                   "a worker trains b x K samples per step; default 1; not with --mode async)")
    p.add_argument("--recompute", choices=["none", "full"], default="none",
                   help="full: recompute every block's forward in backward (activation "
                   "checkpointing: residual blocks, transformer blocks, a stage of layers), "
                   "less memory for one more forward; default none")
    p.add_argument("--steps", type=positive_int, default=20, metavar="N")
    p.add_argument("--warmup-steps", type=int, default=2, metavar="N",
                   help="steps left out of the medians (default 2)")
    p.add_argument("--partition", choices=["balanced", "tensor"], default=None,
                   help="parameter servers: even contiguous chunks (default), or whole "
                   "tensors placed greedily")
    p.add_argument("--piece-size", type=bytes_arg, default=None, metavar="BYTES",
                   help="split shards into messages of this size (sync; e.g. 4MB)")
    p.add_argument("--colocate", action="store_true",
                   help="servers on the worker hosts (as --ps-placement colocated)")
    p.add_argument("--ps-placement", choices=["dedicated", "colocated"], default=None,
                   help="colocated: server k on worker host k mod W, any --ps (the plan's "
                        "placement; under torchrun --ps must equal --workers); default "
                        "dedicated")
    p.add_argument("--emulate-network", default=None, metavar="RATE",
                   help="one network namespace per host, links shaped to RATE (e.g. 1gbit)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds any wait may take before the job fails (default 60)")
    p.add_argument("--checkpoint-dir", default=None, metavar="D")
    p.add_argument("--checkpoint-every", type=positive_int, default=None, metavar="K")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint-dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=None, metavar="PATH",
                   help="image folder (PATH/<class>/<image>), or a language model's token "
                        "file (flat uint16/uint32 ids, --token-dtype); synthetic by default")
    p.add_argument("--loader-workers", type=int, default=2, metavar="L",
                   help="with --data: loader processes per worker decoding ahead of the "
                   "step (0: decode in the training process; default 2)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="where workers train (default: cuda when torch sees a GPU). On cuda "
                   "all-reduce runs NCCL with one GPU per rank; parameter-server workers "
                   "take GPU k mod count and exchange through pinned host memory with "
                   "servers on the CPU over Gloo")
    p.add_argument("--algorithm", default="default", metavar="NAME",
                   help="computation configuration every worker trains in, as the profile and "
                   "the plan name it: default, or options joined with + from channels_last, "
                   "bf16_autocast, fp16_autocast (all-reduce), cudnn_benchmark, tf32, "
                   "fp32_strict (e.g. channels_last+bf16_autocast)")
    p.add_argument("--launcher", choices=["local", "torchrun"], default="local")
    p.add_argument("--transport", choices=["tcp", "shm", "auto"], default="tcp",
                   help="how parameter-server pieces travel: Gloo over TCP (default), shared "
                   "memory between ranks of this host (local launcher, CPU, sync, no emulated "
                   "network), or auto (shm where it can, else tcp); run.json says which")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch threads per worker (default: cores / workers)")
    p.add_argument("--out", default="run.json", help="run.json path (default run.json)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.add_argument("--json", action="store_true", help="print run.json to stdout")
    add_parallel_options(p)  # --tp, --pp, --vpp, --schedule, --sequence-parallel, --cp,
    # --precision; --recompute also takes selective there
    p.set_defaults(func=run)


def _shard_level(args) -> int:
    if args.zero is not None and args.architecture != "fsdp":
        from scalelab.errors import UsageError

        raise UsageError(f"--zero {args.zero} needs --architecture fsdp")
    return args.zero or 3


def config_from_args(args):
    from scalelab.errors import UsageError
    from scalelab.runner import RunConfig

    if args.colocate and args.ps_placement == "dedicated":
        raise UsageError("--colocate puts the servers on the worker hosts: it contradicts "
                         "--ps-placement dedicated")
    if args.partition is not None and args.architecture != "ps":
        raise UsageError(f"--partition {args.partition} places tensors on parameter servers: "
                         f"it has no meaning with --architecture {args.architecture} (drop "
                         "it, or use --architecture ps)")

    return RunConfig(
        workload=workload_from_args(args), workers=args.workers, ps=args.ps,
        architecture=args.architecture, shard_level=_shard_level(args), mode=args.mode,
        batch_size=args.batch_size,
        steps=args.steps, warmup_steps=args.warmup_steps,
        partition=args.partition or "balanced",
        accumulation_steps=args.accumulation_steps, recompute=args.recompute,
        piece_bytes=args.piece_size,
        colocate=args.colocate or args.ps_placement == "colocated",
        emulate_network=args.emulate_network, timeout_s=args.timeout,
        checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
        resume=args.resume, seed=args.seed, data=args.data,
        loader_workers=args.loader_workers, launcher=args.launcher,
        threads=args.threads, device=args.device, algorithm=args.algorithm,
        transport=args.transport)


def _fmt(v, scale=1e3, unit="ms"):
    return "-" if v is None else f"{v * scale:.2f} {unit}"


def _table(result: dict):
    from rich.table import Table

    t = Table(title="scalelab run")
    t.add_column("phase")
    t.add_column("median", justify="right")
    t.add_column("p10..p90", justify="right")
    for name, s in result["steps"].items():
        if s:
            t.add_row(name, _fmt(s["median"]), f"{_fmt(s['p10'])} .. {_fmt(s['p90'])}")
    return t


MIN_TIMED_STEPS = 5


def _finished(result: dict, out: Path | None) -> dict:
    """A resumed run that had nothing left to train: the earlier run's result where ``out``
    holds it (same final parameters), else this one (its checksum, no timings)."""
    from scalelab.results import read_json

    if out is None or not out.is_file():
        return result
    try:
        before = read_json(out, "run")
    except Exception:  # noqa: BLE001 - another file there: keep this run's result
        return result
    if before.get("final_param_checksum") == result.get("final_param_checksum"):
        return before
    return result


def run(args) -> int:
    from scalelab.cli._common import console, err_console
    from scalelab.results import write_json
    from scalelab.runner import run_training

    if args.launcher == "torchrun":  # this process is the rank: set before torch loads OpenMP
        from scalelab.runner.launch import training_environment

        os.environ.update(training_environment())
    from scalelab.cli import _run_parallel

    if _run_parallel.wants_parallel(args):  # a tensor or pipeline layout
        return _run_parallel.main(args)
    cfg = config_from_args(args)
    out = Path(args.out) if args.out else None
    ranks_path = out.with_name(out.stem + ".ranks.jsonl") if out else None
    show = not args.quiet and sys.stderr.isatty()
    if show:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        bar = Progress("[progress.description]{task.description}", BarColumn(),
                       MofNCompleteColumn(), TimeRemainingColumn(), console=err_console,
                       transient=True)
        with bar:
            task = bar.add_task("training", total=cfg.steps)

            def progress(rec):
                if rec.get("type") == "step":
                    loss = rec.get("loss")
                    bar.update(task, completed=rec["step"] + 1,
                               description=f"training (loss {loss:.4f})" if loss else "training")

            result = run_training(cfg, progress=progress, ranks_path=ranks_path)
    else:
        result = run_training(cfg, ranks_path=ranks_path)
    if not result:  # a torchrun rank other than 0
        return 0
    timed = result.get("timed_steps")
    done = result.get("samples_per_s") is None and result.get("resumed_from_step") == cfg.steps
    if done:  # resumed from the last step's checkpoint: nothing to train
        result = _finished(result, out)
        if not args.json:
            err_console.print(
                f"the run in {cfg.checkpoint_dir} was complete: its checkpoint is at its last "
                f"step ({cfg.steps}), so nothing was trained"
                + (f"; its result is {out}'s" if result.get("samples_per_s") else "")
                + " (raise --steps to train on)", highlight=False, soft_wrap=True)
    elif timed is not None and timed < MIN_TIMED_STEPS and not args.json:
        err_console.print(f"warning: {timed} timed step(s) after {result['warmup_steps_used']} "
                          f"warm-up: medians of fewer than {MIN_TIMED_STEPS} steps are noisy "
                          f"(use --steps {MIN_TIMED_STEPS + cfg.warmup_steps} or more)",
                          highlight=False, soft_wrap=True)
    if not args.json:
        for w in result.get("warnings", []):
            err_console.print(f"warning: {w}", highlight=False, soft_wrap=True)
    if out:
        write_json(out, "run", result)
    if args.json:
        print(json.dumps(result, indent=2))
    elif not args.quiet:
        console.print(_table(result))
        sps, tps = result.get("samples_per_s"), result.get("tokens_per_s")
        console.print(("" if sps is None else f"samples/s {sps:.1f}  ")
                      + ("" if tps is None else f"tokens/s {tps:,.0f}  ") + "final_param_checksum "
                      f"{result['final_param_checksum']:.10g}" + (f"  -> {out}" if out else ""))
    return 0
