"""Gradient accumulation and the peak memory of a worker, shared by the runners.

A step of ``--accumulation-steps K`` at ``--batch-size b`` trains a worker's ``b K``
samples (its shard of the step, as one process at batch ``b K`` would see them, so runs
agree with the unaccumulated run at ``b K``) as K micro-batches of b, one forward and
backward each, the gradients summing in place. Each micro-batch's loss is divided by K:
with the loss a mean over its b samples,

    sum_j (1/K) (1/b) sum_{i in j} l_i = (1/(bK)) sum_i l_i,

the mean over the bK samples, so the accumulated gradient is the big batch's (exactly so
in real arithmetic; within rounding in floats). The exchange runs once, after the last
micro-batch: DDP's ``no_sync`` on the first K-1, FSDP2's
``set_requires_gradient_sync(False)`` on them (its gradients stay whole and unreduced
until the last backward: ZeRO-2/3 hold the full gradient while accumulating), a
parameter-server worker pushes only once its last backward is done.
"""

from __future__ import annotations

import contextlib

import torch


def micro_batches(x: torch.Tensor, y: torch.Tensor, k: int):
    """The K micro-batches of a worker's shard, in order (views, no copies)."""
    if k == 1:
        return [(x, y)]
    if x.shape[0] % k:
        raise ValueError(f"a shard of {x.shape[0]} samples does not split into {k} "
                         "micro-batches")
    return list(zip(x.tensor_split(k), y.tensor_split(k)))


def accumulate(k: int, x, y, forward_loss, backward, sync_off=None):
    """Forward and backward over the K micro-batches of ``(x, y)``.

    ``forward_loss(x, y)`` returns the micro-batch's (mean) loss, ``backward(loss)`` runs
    its backward; ``sync_off()`` is a context manager that holds the exchange back (the
    first K-1 micro-batches run under it). Returns the step's loss, the mean over the
    bK samples (a detached tensor)."""
    total = None
    for j, (xj, yj) in enumerate(micro_batches(x, y, k)):
        last = j == k - 1
        with (sync_off() if sync_off is not None and not last else contextlib.nullcontext()):
            loss = forward_loss(xj, yj)
            if k > 1:
                loss = loss / k
            backward(loss)
        total = loss.detach() if total is None else total + loss.detach()
    return total


class PeakMemory:
    """A worker's peak memory over its timed steps: started at ``start_step`` (the first
    after the warm-up), read at the end. CUDA's peak allocated bytes on a GPU, the
    process's peak resident set (VmHWM, reset through ``/proc/self/clear_refs``) on the
    CPU (:mod:`scalelab.profiler.memory`). ``baseline_bytes``: what the process held when
    the peak was started (the model state, the interpreter); ``peak_step_bytes`` what the
    steps added on top (activations, gathered parameters, temporaries). On the CPU glibc's
    dynamic mmap threshold keeps freed large tensors in its heap, so the resident set
    follows the live bytes only when ``MALLOC_MMAP_THRESHOLD_`` is fixed in the workers'
    environment (e.g. 65536); otherwise it is an upper bound."""

    def __init__(self, device, start_step: int):
        self.device = torch.device(device)
        self.start_step = max(int(start_step), 0)
        self.baseline: int | None = None

    def at_step(self, step: int) -> None:
        if step == self.start_step or self.baseline is None:
            from scalelab.profiler.memory import reset_peak_memory

            reset_peak_memory(self.device)
            self.baseline = current_bytes(self.device)

    def summary(self) -> dict:
        if self.baseline is None:
            return {}
        from scalelab.profiler.memory import peak_memory_bytes

        peak = peak_memory_bytes(self.device)
        return {"peak_bytes": peak, "baseline_bytes": self.baseline,
                "peak_step_bytes": peak - self.baseline,
                "counted": ("CUDA peak allocated bytes" if self.device.type == "cuda"
                            else "peak resident set (VmHWM)")}


def current_bytes(device: torch.device) -> int:
    """Allocated bytes on a GPU, resident bytes of this process on the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    import os

    from scalelab.profiler.memory import resident_bytes

    return resident_bytes(os.getpid()) or 0
