"""What to paste into a bug report: versions, device, threads."""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import sys
from importlib import metadata
from pathlib import Path

import torch


def _torchvision_version() -> str:
    """``torchvision.__version__`` (with its build label, e.g. ``0.29.1+cu130``), read from
    its ``version.py`` without importing it, else its package's version."""
    try:
        spec = importlib.util.find_spec("torchvision")
        text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
        found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", text, re.M)
        if found:
            return found.group(1)
    except (AttributeError, TypeError, OSError, ValueError):
        pass
    try:
        return metadata.version("torchvision")
    except metadata.PackageNotFoundError:
        return "none"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def collect_environment(device: str = "cpu") -> dict:
    """Versions and the device as this process sees them (torchvision's version without
    importing it: that takes seconds, most of them importing ``torch._dynamo``)."""
    from scalelab import __version__

    env = {
        "scalelab": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torchvision": _torchvision_version(),
        "device": device,
        "device_name": _cpu_name(),
        "num_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "cuda_available": torch.cuda.is_available(),
        "cuda": torch.version.cuda,
        "gloo": torch.distributed.is_available() and torch.distributed.is_gloo_available(),
    }
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(device_name=props.name, device_memory_bytes=int(props.total_memory),
                   device_count=torch.cuda.device_count(),
                   cudnn=torch.backends.cudnn.version(),
                   nccl=".".join(map(str, torch.cuda.nccl.version())))
    return env
