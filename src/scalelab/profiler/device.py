"""Which device a profile measures: its type from ``torch.device``, its index made explicit.

``"cuda"`` alone means the process's GPU: ``LOCAL_RANK`` when torchrun (or any launcher
that follows its convention) set it, else the current CUDA device. ``"cuda:1"`` means GPU 1
whatever the environment says. Everything in the profiler compares ``torch.device(d).type``,
never the string, so ``"cuda:1"`` times on GPU 1 and not, as a string test would, on CPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import torch

from scalelab.errors import UsageError


def parse_device(name: str | torch.device) -> torch.device:
    """``torch.device(name)``, with a malformed name turned into a usage error."""
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise UsageError(f"--device {name!r}: expected cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {name!r}: the profiler measures cpu or cuda devices, "
                         f"not {dev.type}")
    return dev


def device_index(dev: torch.device, env: Mapping[str, str], device_count: int,
                 current: Callable[[], int]) -> int:
    """The CUDA index ``dev`` names: its own, else ``LOCAL_RANK``, else ``current()``.

    Pure so that the choice can be tested without a GPU; ``device_count`` bounds it.
    """
    if dev.index is not None:
        index = dev.index
        source = f"cuda:{index}"
    elif env.get("LOCAL_RANK", "").strip():
        try:
            index = int(env["LOCAL_RANK"])
        except ValueError:
            raise UsageError(f"LOCAL_RANK={env['LOCAL_RANK']!r} is not an integer") from None
        source = f"LOCAL_RANK={index}"
    else:
        index = current()
        source = "the current CUDA device"
    if device_count < 1:
        raise UsageError("--device cuda: CUDA is not available on this machine "
                         "(torch.cuda.is_available() is False)")
    if not 0 <= index < device_count:
        raise UsageError(f"{source}: this machine has {device_count} CUDA device(s), "
                         f"indices 0..{device_count - 1}")
    return index


def resolve_device(name: str | torch.device, env: Mapping[str, str] | None = None
                   ) -> torch.device:
    """``cpu`` or ``cuda:<index>`` with the index made explicit (see :func:`device_index`)."""
    dev = parse_device(name)
    if dev.type == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine "
                         "(torch.cuda.is_available() is False)")
    index = device_index(dev, os.environ if env is None else env, torch.cuda.device_count(),
                         torch.cuda.current_device)
    return torch.device("cuda", index)


def is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"
