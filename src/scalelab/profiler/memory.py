"""Peak memory of a training step: CUDA's allocator statistics or the process's peak RSS.

Every function takes the device (``"cpu"``, ``"cuda:1"``, a ``torch.device``) and asks
CUDA about that device's index, never about device 0 by default.
"""

from __future__ import annotations

import os
import resource

import torch


def _cuda(device: str | torch.device) -> torch.device | None:
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())


def reset_peak_memory(device: str | torch.device) -> None:
    """Start a new peak: CUDA's counter, or the kernel's high-water mark of this process."""
    dev = _cuda(device)
    if dev is not None:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        return
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # 5: reset the peak resident set size (VmHWM), proc(5)
    except OSError:
        pass


def peak_memory_bytes(device: str | torch.device) -> int:
    """Peak since the last reset: allocated bytes on CUDA, resident bytes on CPU."""
    dev = _cuda(device)
    if dev is not None:
        torch.cuda.synchronize(dev)
        return int(torch.cuda.max_memory_allocated(dev))
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def resident_bytes(pid: int) -> int | None:
    """Current resident memory of process ``pid`` (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def device_memory_bytes(device: str | torch.device) -> int:
    """Memory of the device: the GPU's total, or the memory available to this machine now."""
    dev = _cuda(device)
    if dev is not None:
        return int(torch.cuda.get_device_properties(dev).total_memory)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
