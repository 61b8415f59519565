"""``scalelab plan`` for a language model: its options and its run (the parser's other
options, the cluster's, are :mod:`scalelab.cli.plan`'s)."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from scalelab.cli._common import console, err_console, positive_int

LM_EPILOG = """language models (a preset, hf:PATH, or a workload file naming one):
  scalelab plan --model llama3-70b --seq-len 8192 --cluster llm-8x8-h100-ndr
  scalelab plan --model llama3-70b --nodes 8 --gpus-per-node 8 --device H100-SXM \\
      --network IB-NDR --tokens 2T --global-batch 512
  scalelab plan --model llama3-8b --device H100-SXM,A100-SXM-40GB --nodes 4 \\
      --gpus-per-node 8 --network IB-NDR --objective cost
  scalelab plan --model llama3-70b --cluster llm-8x8-h100-ndr --tp 8 --pp 1 --cp 1 \\
      --micro-batch 1 --layout zero1 --recompute selective --precision bf16 \\
      --sequence-parallel        (every choice fixed: that configuration, evaluated)
"""


def add_lm_options(p: argparse.ArgumentParser) -> None:
    """The language-model options of ``scalelab plan`` (DESIGN.md's names)."""
    g = p.add_argument_group("language models (with --model, or a workload naming one)")
    g.add_argument("--seq-len", type=positive_int, metavar="S",
                   help="tokens per sequence (default: the workload's, else the model's "
                        "positions)")
    have = p._option_string_actions  # options the data-parallel plan defines too
    if "--global-batch" not in have:
        g.add_argument("--global-batch", type=positive_int, metavar="G",
                       help="sequences per optimizer step (default: about 4M tokens)")
    g.add_argument("--micro-batch", type=positive_int, metavar="m",
                   help="sequences per GPU per forward (default: searched)")
    if "--recompute" not in have:
        g.add_argument("--recompute", choices=["none", "selective", "full"],
                       help="activation recomputation (default: searched)")
    elif "selective" not in have["--recompute"].choices:  # a language model's third way
        have["--recompute"].choices = ["none", "selective", "full"]
    g.add_argument("--tp", type=positive_int, metavar="T", help="tensor-parallel degree")
    g.add_argument("--pp", type=positive_int, metavar="P", help="pipeline stages")
    g.add_argument("--vpp", type=positive_int, metavar="V",
                   help="virtual stages per pipeline rank (interleaved schedule)")
    g.add_argument("--cp", type=positive_int, metavar="C", help="context-parallel degree")
    g.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved"],
                   help="pipeline schedule (default: searched)")
    g.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction,
                   default=None, help="sequence parallelism beside tp (default: searched)")
    g.add_argument("--objective", choices=["time", "cost"], default="time",
                   help="fastest (time) or cheapest per token (cost: needs a price per "
                        "GPU-hour for every device)")
    g.add_argument("--tokens", metavar="N",
                   help="a token budget (2T, 300B, 1e12): time and cost to train it")


def is_lm(args) -> bool:
    """Whether the command line plans a language model: --model, or a workload file naming
    one."""
    if getattr(args, "model", None):
        return True
    if not getattr(args, "workload", None):
        return False
    from scalelab.paths import resolve_example
    from scalelab.plan.lm.inputs import is_lm_workload
    from scalelab.results import read_toml

    return is_lm_workload(read_toml(resolve_example(args.workload, "--workload")))


def _workload(args):
    from scalelab.paths import resolve_example
    from scalelab.plan.lm.inputs import LMWorkload, load_lm_workload, resolve_model

    if args.model:
        from scalelab.plan.lm.inputs import is_lm_name

        if not is_lm_name(args.model):
            from scalelab.errors import UsageError

            raise UsageError(f"--model {args.model}: not a language-model preset or hf:PATH "
                             "(a torchvision model is planned from --profile or --workload)")
        cfg = resolve_model(args.model)
        return LMWorkload(cfg, args.model, seq_len=args.seq_len or cfg.max_seq)
    return load_lm_workload(resolve_example(args.workload, "--workload"), args.seq_len)


def choices_of(args):
    """The choices the command line fixed."""
    from scalelab.plan.lm.space import Choices

    return Choices(tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, schedule=args.schedule,
                   sequence_parallel=args.sequence_parallel, micro_batch=args.micro_batch,
                   accumulation=args.accumulation_steps, layout=args.layout,
                   recompute=args.recompute, precision=args.precision)


def build_lm_plan(args, overrides: dict):
    """The language-model plan the command line asks for: one cluster per device named
    (``--device A,B`` compares GPU types)."""
    from scalelab.errors import UsageError
    from scalelab.paths import resolve_example
    from scalelab.plan import load_cluster
    from scalelab.plan.lm.inputs import parse_tokens
    from scalelab.plan.lm.recommend import lm_plan

    wl = _workload(args)
    tokens = parse_tokens(args.tokens) if args.tokens is not None else None
    # the cluster's accumulation and precision are the data-parallel plan's: here they are
    # the layout's choices
    base = {k: v for k, v in overrides.items() if k not in ("accumulation_steps", "precision")}
    devices = [d.strip() for d in (args.device or "").split(",") if d.strip()] or [None]
    if len(devices) != len(set(devices)):
        raise UsageError(f"--device {args.device}: a device named twice")
    if len(devices) > 1 and args.price_per_gpu_hour is not None:
        raise UsageError("--price-per-gpu-hour gives one price for several devices: give "
                         "each device's price in its own cluster file, or use the catalog's")
    path = resolve_example(args.cluster) if args.cluster else None
    clusters = [load_cluster(path, {**base, "device": d}) for d in devices]
    return wl, lm_plan(wl, clusters, choices_of(args), args.objective, args.global_batch,
                       tokens)


def _table(data: dict) -> Table:
    from scalelab.plan.lm.story import layout_text

    r = data["recommendation"]
    t = Table(title=f"{r['model']} at seq {r['seq_len']}, global batch {r['global_batch']}: "
                    "the recommendation and the runners-up [estimate]")
    for col in ("", "device", "layout", "step", "tokens/s", "MFU", "GiB/GPU", "$/M tokens"):
        t.add_column(col, justify="left" if col in ("", "device", "layout") else "right")
    for i, row in enumerate([r] + list(r.get("alternatives") or [])):
        cpm = row.get("cost_per_million_tokens")
        t.add_row("*" if i == 0 else str(i), row["device"], layout_text(row),
                  f"{row['step_s']:.3f} s", f"{row['tokens_per_s']:,.0f}", f"{row['mfu']:.1%}",
                  f"{row['memory_bytes'] / 2**30:,.1f}", "-" if cpm is None else f"{cpm:.3f}")
    return t


def run_lm(args, overrides: dict) -> int:
    from scalelab.plan.lm.story import headline
    from scalelab.results import write_json

    _, plan = build_lm_plan(args, overrides)
    data = plan.to_dict()
    write_json(args.out, "plan", data)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    if args.quiet:
        console.print(headline(data), soft_wrap=True, highlight=False)
        return 0
    out = console if console.is_terminal else Console(width=140)
    out.print(_table(data))
    out.print(headline(data), soft_wrap=True, highlight=False)
    for reason in data["recommendation"]["reasons"]:
        out.print(f"  - {reason}", soft_wrap=True, highlight=False)
    out.print(f"launch: {data['recommendation']['launch']}", soft_wrap=True, highlight=False)
    for w in data["warnings"]:
        err_console.print(f"warning: {w}", soft_wrap=True, highlight=False)
    console.print(f"wrote {args.out}")
    return 0


LM_ONLY = ("seq_len", "micro_batch", "tp", "pp", "vpp", "cp", "schedule",
           "sequence_parallel", "tokens")


def lm_only_options(args) -> None:
    """One line when a language model's option is given to a data-parallel plan."""
    from scalelab.errors import UsageError

    given = [k for k in LM_ONLY if getattr(args, k, None) is not None]
    if args.objective != "time":
        given.append("objective")
    if args.precision == "fp8":
        given.append("precision fp8")
    if args.recompute == "selective":
        given.append("recompute selective")
    if given:
        names = ", ".join("--" + k.replace("_", "-") for k in given)
        raise UsageError(f"{names}: for a language model (--model NAME, or a workload file "
                         "naming a preset or hf:PATH)")
