"""Computation configurations ("algorithms" in the paper's sense): the execution choices
that change a step's speed and memory without changing the model.

A name is a ``+``-joined set of options; ``default`` is none of them and means PyTorch's
defaults on the device (on CUDA: TF32 for cuDNN convolutions, IEEE FP32 for matmuls, as
PyTorch ships; see "TensorFloat-32 (TF32) on Ampere (and later) devices" in PyTorch's CUDA
semantics notes, https://docs.pytorch.org/docs/stable/notes/cuda.html):

- ``channels_last``: NHWC memory format for 4-D inputs and the model's weights;
- ``bf16_autocast`` / ``fp16_autocast``: mixed precision with ``torch.autocast``; fp16
  trains through a ``torch.amp.GradScaler`` (loss scaling), as fp16 training must;
- ``cudnn_benchmark``: let cuDNN time its convolution algorithms and keep the fastest (the
  first step at a shape does the timing, so trials warm up before they are timed);
- ``tf32``: TF32 for matmuls as well as convolutions;
- ``fp32_strict``: IEEE FP32 everywhere, convolutions included (no TF32 at all).

TF32 is set through ``torch.backends.cuda.matmul.fp32_precision`` and
``torch.backends.cudnn.conv.fp32_precision`` where they exist (torch >= 2.9; the legacy
``allow_tf32`` flags warn there, and reading them raises once the new API has been used),
else through the legacy flags; either way the previous values are restored after the trial.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from scalelab.algorithm_names import parse

CPU_CANDIDATES = ("default", "channels_last", "bf16_autocast", "channels_last+bf16_autocast")
CUDA_CANDIDATES = (
    "default", "fp32_strict", "cudnn_benchmark", "tf32", "cudnn_benchmark+tf32",
    "channels_last+cudnn_benchmark", "bf16_autocast+cudnn_benchmark",
    "fp16_autocast+cudnn_benchmark", "channels_last+bf16_autocast+cudnn_benchmark",
)


def candidates(device: str | torch.device, input_dims: int) -> list[str]:
    """The candidates that matter on ``device``; memory-format choices need 4-D inputs."""
    names = CUDA_CANDIDATES if torch.device(device).type == "cuda" else CPU_CANDIDATES
    if input_dims != 3:
        names = tuple(n for n in names if "channels_last" not in n)
    return list(names)


def prepare(name: str, model: nn.Module, x: torch.Tensor) -> tuple[nn.Module, torch.Tensor]:
    """Put the model and an input batch into the memory format ``name`` asks for."""
    if "channels_last" in parse(name) and x.dim() == 4:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x


def prepare_batch(name: str, x: torch.Tensor) -> torch.Tensor:
    """A batch in the memory format ``name`` asks for (the model already converted)."""
    if "channels_last" in parse(name) and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x


def precision_api() -> str:
    """``"fp32_precision"`` where torch has the per-backend precision API, else ``"allow_tf32"``."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(torch.backends.cuda.matmul, "fp32_precision") and conv is not None \
            and hasattr(conv, "fp32_precision"):
        return "fp32_precision"
    return "allow_tf32"


def tf32_setting(opts: frozenset[str]) -> tuple[bool, bool]:
    """(matmul TF32, convolution TF32) for a set of options; none of them: PyTorch's defaults."""
    if "fp32_strict" in opts:
        return False, False
    if "tf32" in opts:
        return True, True
    return False, True


def _get_tf32() -> tuple:
    if precision_api() == "fp32_precision":
        return (torch.backends.cuda.matmul.fp32_precision,
                torch.backends.cudnn.conv.fp32_precision)
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def _put_tf32(values: tuple) -> None:
    if precision_api() == "fp32_precision":
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = \
            values
    else:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = values


def _tf32_values(matmul: bool, conv: bool) -> tuple:
    if precision_api() == "fp32_precision":
        return ("tf32" if matmul else "ieee"), ("tf32" if conv else "ieee")
    return matmul, conv


@contextlib.contextmanager
def backend_flags(name: str, device: str | torch.device = "cuda") -> Iterator[None]:
    """Set cuDNN benchmark and TF32 for the block on CUDA, then restore what was there.

    On CPU nothing is touched: neither flag changes a CPU computation.
    """
    opts = parse(name)
    if torch.device(device).type != "cuda":
        yield
        return
    saved_benchmark, saved_tf32 = torch.backends.cudnn.benchmark, _get_tf32()
    torch.backends.cudnn.benchmark = "cudnn_benchmark" in opts
    _put_tf32(_tf32_values(*tf32_setting(opts)))
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved_benchmark
        _put_tf32(saved_tf32)


def autocast(name: str, device: str | torch.device):
    """The autocast context for ``name`` on ``device`` (a no-op context without one)."""
    opts = parse(name)
    device_type = torch.device(device).type
    if "bf16_autocast" in opts:
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    if "fp16_autocast" in opts:
        return torch.autocast(device_type=device_type, dtype=torch.float16)
    return contextlib.nullcontext()


def grad_scaler(name: str, device: str | torch.device) -> torch.amp.GradScaler | None:
    """A loss scaler for fp16 autocast (fp16 gradients underflow without one), else None."""
    if "fp16_autocast" in parse(name):
        return torch.amp.GradScaler(torch.device(device).type)
    return None


def warmup_steps(name: str, device: str | torch.device, asked: int) -> int:
    """Warm-up steps a trial needs: on CUDA at least 1, and 2 when cuDNN benchmarks.

    The first step at a shape loads kernels (and with ``cudnn_benchmark`` times every
    convolution algorithm); timing it would charge that once-only cost to every step.
    """
    if torch.device(device).type != "cuda":
        return asked
    return max(asked, 2 if "cudnn_benchmark" in parse(name) else 1)
