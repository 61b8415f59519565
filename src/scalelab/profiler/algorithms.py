"""Computation configurations ("algorithms" in the paper's sense): the execution choices
that change a step's speed and memory without changing the model.

A name is a ``+``-joined set of options; ``default`` is none of them:

- ``channels_last``: NHWC memory format for 4-D inputs and the model's weights;
- ``bf16_autocast`` / ``fp16_autocast``: mixed precision with ``torch.autocast``;
- ``cudnn_benchmark``: let cuDNN time its convolution algorithms and keep the fastest;
- ``tf32``: TensorFloat-32 matmuls and convolutions on Ampere and later.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from scalelab.errors import UsageError

OPTIONS = ("channels_last", "bf16_autocast", "fp16_autocast", "cudnn_benchmark", "tf32")
CPU_CANDIDATES = ("default", "channels_last", "bf16_autocast", "channels_last+bf16_autocast")
CUDA_CANDIDATES = (
    "default", "cudnn_benchmark", "tf32", "cudnn_benchmark+tf32", "channels_last+cudnn_benchmark",
    "bf16_autocast+cudnn_benchmark", "fp16_autocast+cudnn_benchmark",
    "channels_last+bf16_autocast+cudnn_benchmark",
)


def parse(name: str) -> frozenset[str]:
    """'channels_last+bf16_autocast' -> its options; 'default' -> none."""
    if name == "default":
        return frozenset()
    opts = frozenset(name.split("+"))
    unknown = sorted(opts - set(OPTIONS))
    if unknown:
        raise UsageError(f"unknown computation option(s) {', '.join(unknown)} "
                         f"(known: default, {', '.join(OPTIONS)})")
    if {"bf16_autocast", "fp16_autocast"} <= opts:
        raise UsageError(f"{name!r}: choose one of bf16_autocast and fp16_autocast")
    return opts


def candidates(device: str, input_dims: int) -> list[str]:
    """The candidates that matter on ``device``; memory-format choices need 4-D inputs."""
    names = CUDA_CANDIDATES if device == "cuda" else CPU_CANDIDATES
    if input_dims != 3:
        names = tuple(n for n in names if "channels_last" not in n)
    return list(names)


def prepare(name: str, model: nn.Module, x: torch.Tensor) -> tuple[nn.Module, torch.Tensor]:
    """Put the model and an input batch into the memory format ``name`` asks for."""
    if "channels_last" in parse(name) and x.dim() == 4:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x


@contextlib.contextmanager
def backend_flags(name: str) -> Iterator[None]:
    """Set cuDNN/TF32 flags for the duration of the block, then restore them."""
    opts = parse(name)
    saved = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32)
    torch.backends.cudnn.benchmark = "cudnn_benchmark" in opts
    tf32 = "tf32" in opts
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
         torch.backends.cudnn.allow_tf32) = saved


def autocast(name: str, device: str):
    """The autocast context for ``name`` on ``device`` (a no-op context without one)."""
    opts = parse(name)
    if "bf16_autocast" in opts:
        return torch.autocast(device_type=device, dtype=torch.bfloat16)
    if "fp16_autocast" in opts:
        return torch.autocast(device_type=device, dtype=torch.float16)
    return contextlib.nullcontext()
