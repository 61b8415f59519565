"""Argument helpers shared by the subcommands (workload options, sizes, console)."""

from __future__ import annotations

import argparse
import re

from rich.console import Console

from scalelab.errors import UsageError

console = Console(stderr=False)
err_console = Console(stderr=True)

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}


def parse_bytes(text: str) -> int:
    """'8GiB' -> 8589934592, '500MB' -> 500000000, '1024' -> 1024."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise UsageError(f"not a size: {text!r} (examples: 8GiB, 500MB, 1048576)")
    value = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if value <= 0:
        raise UsageError(f"size must be positive: {text!r}")
    return int(value)


def bytes_arg(text: str) -> int:
    try:
        return parse_bytes(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {value}")
    return value


def add_workload_options(p: argparse.ArgumentParser) -> None:
    """MODEL and the options that define the training step (shared by profile/run/...)."""
    p.add_argument("model", metavar="MODEL",
                   help="torchvision model name (resnet50, alexnet, ...), a language-model "
                        "preset (gpt2, llama3-8b, ...), hf:PATH (a Hugging Face config.json) "
                        "or package.module:factory")
    p.add_argument("--input-shape", default=None, metavar="C,H,W",
                   help="per-sample input shape of an image model, positive integers "
                        "(default 3,224,224); checked against MODEL before anything runs")
    p.add_argument("--num-classes", type=positive_int, default=1000, metavar="N")
    p.add_argument("--input", choices=["image", "tokens"], default=None,
                   help="what MODEL takes: tokens for a language model (a preset, hf:PATH, "
                        "or a factory whose first layer is nn.Embedding: found by itself)")
    p.add_argument("--seq-len", type=positive_int, default=None, metavar="S",
                   help="tokens per sequence of a language model (default min(1024, the "
                        "model's positions)); --batch-size counts sequences")
    p.add_argument("--layers", type=positive_int, default=None, metavar="N",
                   help="a reduced copy of a built-in language model: the same widths, N "
                        "blocks (to measure here what is planned at full depth)")
    p.add_argument("--token-dtype", choices=["auto", "uint16", "uint32"], default="auto",
                   help="ids in a token file (--data PATH.bin): auto is uint16 for a "
                        "vocabulary of up to 65,536, else uint32")
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                   help="sgd (momentum 0.9) or adam (default sgd)")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    p.add_argument("--loss", choices=["cross_entropy"], default="cross_entropy")


def workload_from_args(args: argparse.Namespace):
    """The workload the options name, checked: the model builds and takes its input (a
    forward and the loss on meta tensors), so a bad MODEL, ``--input-shape`` or
    ``--seq-len`` is one line and exit 2 before any process starts or anything is
    measured. A language model (a preset, ``hf:PATH``, or a factory taking token ids)
    takes ``--seq-len``; ``--input-shape`` given to one is refused."""
    from dataclasses import replace

    from scalelab.workload import WorkloadSpec, check_workload, detect_tokens, parse_input_shape

    told = getattr(args, "input", None)
    base = WorkloadSpec(
        model=args.model,
        num_classes=args.num_classes,
        optimizer=args.optimizer,
        lr=args.lr,
        loss=args.loss,
        input="image" if told == "image" else "",
        layers=getattr(args, "layers", None) or 0,
        token_dtype=getattr(args, "token_dtype", None) or "auto",
    )
    if told != "image":
        base = detect_tokens(base, told=told == "tokens")
    seq = getattr(args, "seq_len", None)
    if base.tokens:
        if args.input_shape is not None:
            raise UsageError(f"--input-shape is for image models: {args.model} takes token "
                             "ids (give --seq-len S; --batch-size counts sequences)")
        spec = replace(base, seq_len=seq or 0, input_shape=())
    else:
        if seq is not None:
            raise UsageError(f"--seq-len is for language models: {args.model} takes images "
                             "(--input-shape C,H,W; --input tokens if it takes token ids)")
        shape = "3,224,224" if args.input_shape is None else args.input_shape
        spec = replace(base, input_shape=parse_input_shape(shape))
    check_workload(spec)
    return spec
