"""Peak memory of a training step: CUDA's allocator statistics or the process's peak RSS."""

from __future__ import annotations

import os
import resource

import torch


def reset_peak_memory(device: str) -> None:
    """Start a new peak: CUDA's counter, or the kernel's high-water mark of this process."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # 5: reset the peak resident set size (VmHWM), proc(5)
    except OSError:
        pass


def peak_memory_bytes(device: str) -> int:
    """Peak since the last reset: allocated bytes on CUDA, resident bytes on CPU."""
    if device == "cuda":
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())
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


def device_memory_bytes(device: str) -> int:
    """Memory of the device: the GPU's total, or the memory available to this machine now."""
    if device == "cuda":
        return int(torch.cuda.get_device_properties(0).total_memory)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
