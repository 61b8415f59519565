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


def activation_bytes(model: torch.nn.Module, batch: torch.Tensor, loss_fn=None) -> int:
    """Bytes of the tensors forward saves for backward (the activations), on any device.

    Runs one forward pass with ``torch.autograd.graph.saved_tensors_hooks`` and adds up the
    storages of the saved tensors that are not parameters, each storage once. On the meta
    device (model and batch built there) nothing is allocated or computed, so a model too
    large for any device can be measured; per sample it is this at batch 1 (or the
    difference of two batches, which leaves out what does not grow with the batch).
    """
    params = {p.untyped_storage().data_ptr() for p in model.parameters()
              if p.device.type != "meta"}
    param_ids = {id(p) for p in model.parameters()}
    seen: dict[tuple, int] = {}
    alive: list[torch.Tensor] = []  # keeps ids unique until the count is done

    def pack(t: torch.Tensor):
        if t.device.type == "meta":
            # meta storages have no address: a tensor (or the tensor it views) counts once
            base = t._base if t._base is not None else t
            if id(base) not in param_ids:
                alive.append(base)
                seen.setdefault(("meta", id(base)), base.untyped_storage().nbytes())
        else:
            ptr = t.untyped_storage().data_ptr()
            if ptr not in params:
                seen.setdefault((t.device.type, ptr), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(batch)
        if loss_fn is not None:
            out = loss_fn(out)
    del out
    return sum(seen.values())
