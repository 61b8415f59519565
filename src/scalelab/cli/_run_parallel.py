"""``scalelab run`` of a tensor- or pipeline-parallel layout (``--tp``, ``--pp``): the
options, the configuration they make and the run (:mod:`scalelab.runner.parallel_run`)."""

from __future__ import annotations

import argparse

from scalelab.cli._common import positive_int
from scalelab.errors import UsageError


def add_parallel_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tensor and pipeline parallelism (language models)")
    g.add_argument("--tp", type=positive_int, default=1, metavar="T",
                   help="tensor-parallel degree (DTensor; divides the heads and KV heads)")
    g.add_argument("--pp", type=positive_int, default=1, metavar="P",
                   help="pipeline stages (torch.distributed.pipelining); --workers = dp x "
                   "tp x pp, --accumulation-steps the micro-batches per step")
    g.add_argument("--vpp", type=positive_int, default=1, metavar="V",
                   help="virtual stages per pipeline rank (--schedule interleaved)")
    g.add_argument("--schedule", choices=["1f1b", "gpipe", "interleaved"], default=None,
                   help="pipeline schedule (default 1f1b; interleaved with --vpp)")
    g.add_argument("--sequence-parallel", dest="sequence_parallel",
                   action=argparse.BooleanOptionalAction, default=None,
                   help="with --tp: norms on slices of the sequence, all-gather and "
                   "reduce-scatter instead of all-reduce (default on with --tp > 1)")
    g.add_argument("--cp", type=positive_int, default=1, metavar="C",
                   help="context-parallel degree (CUDA only; planned, not run here)")
    g.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16", "fp8"],
                   default=None, help="a language model's training precision: fp32 "
                   "(default), bf16 (autocast; CPU and CUDA), tf32 (CUDA); fp16 and fp8 are "
                   "refused")
    have = {a.option_strings[0]: a for a in p._actions if a.option_strings}
    if "--recompute" in have and "selective" not in have["--recompute"].choices:
        have["--recompute"].choices = [*have["--recompute"].choices, "selective"]


def wants_parallel(args) -> bool:
    """Whether the command line asks for a tensor/pipeline/context-parallel layout."""
    return (args.tp > 1 or args.pp > 1 or args.cp > 1 or args.vpp > 1
            or args.schedule is not None or args.sequence_parallel is not None
            or args.precision is not None
            or getattr(args, "recompute", None) == "selective")


def _refuse_foreign(args) -> None:
    """Options of the data-parallel runners that a parallel layout does not take."""
    if args.cp > 1 and (args.device or "cpu") == "cpu":
        raise UsageError(f"--cp {args.cp}: context parallelism does not run on the CPU "
                         "(PyTorch has no sharding rule for its CPU attention kernel)")
    bad = [(args.ps is not None, "--ps"), (args.mode != "sync", "--mode async"),
           (args.data is not None, "--data"), (args.colocate, "--colocate"),
           (args.piece_size is not None, "--piece-size"),
           (args.algorithm != "default", "--algorithm")]
    for given, name in bad:
        if given:
            raise UsageError(f"{name} is not taken by a tensor or pipeline layout (--tp, --pp): "
                             "its data-parallel part all-reduces, or shards with "
                             "--architecture fsdp, on synthetic tokens")


def config_from_args(args):
    """The :class:`~scalelab.runner.parallel_config.ParallelRunConfig` of the options."""
    from scalelab.cli._common import workload_from_args
    from scalelab.parallel import ParallelLayout
    from scalelab.runner.parallel_config import ParallelRunConfig

    _refuse_foreign(args)
    spec = workload_from_args(args)
    if spec.transformer is None:
        raise UsageError(f"tensor and pipeline layouts and --precision train a built-in "
                         f"language model (a preset such as gpt2 or llama3-8b, or hf:PATH): "
                         f"{args.model!r} is not (image runs take --algorithm bf16_autocast)")
    per = args.tp * args.pp * args.cp
    if args.workers % per:
        raise UsageError(f"tp {args.tp} x pp {args.pp} x cp {args.cp} = {per} ranks per "
                         f"data-parallel replica does not divide --workers {args.workers}")
    if args.zero is not None and args.architecture != "fsdp":
        raise UsageError(f"--zero {args.zero} needs --architecture fsdp")
    schedule = args.schedule or "1f1b"
    sp = args.tp > 1 if args.sequence_parallel is None else args.sequence_parallel
    if sp and args.tp == 1:
        raise UsageError("--sequence-parallel splits the sequence over tensor-parallel ranks: "
                         "it needs --tp > 1")
    try:
        layout = ParallelLayout(
            dp=args.workers // per, tp=args.tp, pp=args.pp, cp=args.cp,
            sequence_parallel=sp, schedule=schedule, vpp=args.vpp,
            micro_batch=args.batch_size,
            accumulation=getattr(args, "accumulation_steps", 1),
            precision=args.precision or "fp32",
            recompute=getattr(args, "recompute", None) or "none",
            zero=(args.zero or 3) if args.architecture == "fsdp" else 0)
    except ValueError as e:
        raise UsageError(f"{e} (--accumulation-steps sets the micro-batches per step)"
                         if "micro-batches" in str(e) else str(e)) from None
    return ParallelRunConfig(
        model=spec.transformer, layout=layout, seq_len=spec.seq_len, steps=args.steps,
        warmup_steps=args.warmup_steps, fsdp=args.architecture == "fsdp",
        optimizer=spec.optimizer, lr=spec.lr, momentum=spec.momentum, seed=args.seed,
        timeout_s=args.timeout, checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=args.checkpoint_every, resume=args.resume,
        device=args.device or _default_device(), threads=args.threads,
        emulate_network=args.emulate_network, extra={"model_name": args.model})


def _default_device() -> str:
    from scalelab.runner.devices import default_device

    return default_device()


def main(args) -> int:
    """``scalelab run`` with ``--tp``/``--pp``: train, write run.json, print the split."""
    import json
    import sys
    from pathlib import Path

    from scalelab.cli._common import console, err_console
    from scalelab.results import write_json
    from scalelab.runner.parallel_run import run_parallel

    cfg = config_from_args(args)
    out = Path(args.out) if args.out else None
    ranks_path = out.with_name(out.stem + ".ranks.jsonl") if out else None
    progress = None
    if not args.quiet and not args.json and sys.stderr.isatty():
        def progress(rec):
            loss = rec.get("loss")
            err_console.print(f"step {rec['step'] + 1}/{rec['of']}"
                              + (f" loss {loss:.4f}" if loss is not None else ""),
                              highlight=False)
    result = run_parallel(cfg, progress=progress, ranks_path=ranks_path,
                          launcher=args.launcher)
    if not result:  # a torchrun rank other than 0
        return 0
    if out:
        write_json(out, "run", result)
    if args.json:
        print(json.dumps(result, indent=2))
    elif not args.quiet:
        console.print(summary_line(result) + (f"  -> {out}" if out else ""),
                      highlight=False, soft_wrap=True)
    return 0


def summary_line(result: dict) -> str:
    """'dp 1 x tp 2 +sp, ...: step 41.0 ms (compute 30.1 ms, tp_comm 9.2 ms, ...), ...'."""
    s = result["split"]
    parts = [f"{k.removesuffix('_s')} {v * 1e3:.1f} ms" for k, v in s.items()
             if k.endswith("_s") and v is not None]
    loss = result["losses"][-1] if result["losses"] else float("nan")
    return (f"{result['layout']}: step {result['steps']['step_s']['median'] * 1e3:.1f} ms "
            f"({', '.join(parts)}), tokens/s {result['tokens_per_s']:.0f}, last loss "
            f"{loss:.4f}, final_param_checksum {result['final_param_checksum']:.10g}")
