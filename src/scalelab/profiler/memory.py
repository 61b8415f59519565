"""Peak memory of a training step: CUDA's allocator statistics or the process's peak RSS.

Every function takes the device (``"cpu"``, ``"cuda:1"``, a ``torch.device``) and asks
CUDA about that device's index, never about device 0 by default.
"""

from __future__ import annotations

import math
import os
import resource

import torch

from scalelab.blocks import fsdp_units  # noqa: F401 - the units' rule, named here as before


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


#: Optimizer state per parameter in the parameters' dtype units (SGD: one momentum buffer,
#: Adam: two moments), as :meth:`scalelab.workload.WorkloadSpec.make_optimizer` builds them.


def memory_components(spec) -> dict:
    """Memory by component of ``spec`` (a WorkloadSpec), counted on meta tensors.

    Nothing is allocated, so any model can be counted, including one too large for the
    device: parameters, gradients (same dtype), optimizer state
    (:func:`scalelab.theory.zero.optimizer_state_bytes`), the activations forward saves for
    backward per sample (:func:`activation_bytes` at batch 1 and 2, the difference), the input per
    sample (and with every block recomputed), each tensor's shape and the parameters of each
    FSDP unit (:func:`scalelab.blocks.fsdp_units`).
    fp32 throughout (the dtype the model is built in).
    """
    from scalelab.meta_build import meta_model
    from scalelab.metashapes import ShapedMeta
    from scalelab.theory import zero
    from scalelab.workload import logits_of

    model = meta_model(spec)
    loss = spec.loss_fn()
    from scalelab.blocks import recompute_saved_bytes

    per, recomputed = [], []
    for b in (1, 2):
        with torch.device("meta"):
            x = spec.example_input(b, "meta", empty=True)
            y = spec.example_target(b, "meta")
        with ShapedMeta():
            per.append(activation_bytes(model, x, lambda o, y=y: loss(logits_of(o), y)))
            recomputed.append(recompute_saved_bytes(
                model, lambda x=x, y=y: loss(logits_of(model(x)), y))[1])
    params = [p for p in model.parameters() if p.requires_grad]
    elem = params[0].element_size() if params else 4
    numel = sum(p.numel() for p in params)
    param_bytes = numel * elem
    return {
        "param_count": numel,
        "param_bytes": param_bytes,
        "grad_bytes": param_bytes,
        "optimizer_bytes": int(zero.optimizer_state_bytes(spec.optimizer, param_bytes,
                                                          spec.momentum)),
        "bytes_per_param": elem,
        "activation_bytes_per_sample": max(per[1] - per[0], 0),
        "activation_bytes_fixed": max(2 * per[0] - per[1], 0),
        # with every block recomputed (scalelab.blocks.recompute_saved_bytes): what is saved
        # outside the blocks, their inputs, and the largest block's own while it recomputes
        "activation_bytes_per_sample_recompute": max(recomputed[1] - recomputed[0], 0),
        # a language model's sample: seq_len int64 ids, which are its target too
        "input_bytes_per_sample": (8 * spec.seq_len if spec.tokens
                                   else 4 * math.prod(spec.input_shape) + 8),
        "tensor_shapes": [list(p.shape) for p in params],
        "unit_params": [sum(p.numel() for p in u.parameters()) for u in fsdp_units(model)],
        "counted_on": "meta tensors, fp32",
    }


def try_memory_components(spec) -> dict | None:
    """:func:`memory_components`, or None for a model whose operations meta tensors lack."""
    try:
        return memory_components(spec)
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return None


def too_large_note(components: dict | None, budget_bytes: float) -> str:
    """What a model that fits no batch of the device needs, from its components, and on
    how many such devices ZeRO-3 (every part sharded) would hold batch 1 (gathered units
    left out: a lower bound); "" without components."""
    from scalelab.theory import zero

    if not components:
        return ""
    n_params = max(int(components["param_count"]), 1)
    per_param = [components[k] / n_params for k in ("param_bytes", "grad_bytes",
                                                   "optimizer_bytes")]
    one = components["activation_bytes_per_sample"] + components.get(
        "input_bytes_per_sample", 0)
    plain = zero.model_state(n_params, 1, "ddp", param_bytes_per_param=per_param[0],
                             grad_bytes_per_param=per_param[1],
                             optimizer_bytes_per_param=per_param[2])
    gib = 2**30
    text = (f"; counted on meta tensors it needs parameters {plain.param_bytes / gib:.2f} + "
            f"gradients {plain.grad_bytes / gib:.2f} + optimizer "
            f"{plain.optimizer_bytes / gib:.2f} GiB + {one / gib:.3f} GiB per sample")
    if one >= budget_bytes:
        return text + ": one sample's activations alone exceed the budget"
    need = zero.zero3_min_ranks(plain.total_bytes, budget_bytes, one)
    return text + (f"; ZeRO-3 needs at least {need} devices of this budget for batch 1 "
                   "(model state and activations only)")
