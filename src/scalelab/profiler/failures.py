"""What a failed trial means: the batch does not fit, or the model does not train at it.

Running out of memory shows up in more forms than ``torch.OutOfMemoryError``
(``torch.cuda.OutOfMemoryError`` is the same class): the caching allocator raises that
type, but an allocation that fails inside a library arrives as a plain ``RuntimeError``
whose message names it:

- ``CUDA error: out of memory``: a CUDA runtime call (``cudaMalloc`` outside the caching
  allocator, a kernel launch's own allocation) returned ``cudaErrorMemoryAllocation``;
- ``CUBLAS_STATUS_ALLOC_FAILED``: cuBLAS could not allocate its handle or workspace
  (``CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)```);
- ``CUDNN_STATUS_ALLOC_FAILED`` / ``CUDNN_STATUS_NOT_ENOUGH_WORKSPACE``: cuDNN could not
  get the memory or the workspace its algorithm needs;
- ``HIP out of memory``: the same on ROCm builds;
- on CPU, ``MemoryError`` or ``DefaultCPUAllocator: can't allocate memory``.

Every other exception of a trial means the model does not train at that batch (BatchNorm
refuses one value per channel at batch 1; a model may need a batch it can split): the
search records it and goes on with the next size.
"""

from __future__ import annotations

OOM_MESSAGES = (
    "cuda out of memory",
    "cuda error: out of memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cudnn_status_not_enough_workspace",
    "hip out of memory",
    "can't allocate memory",
    "out of memory",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """True when ``exc`` says an allocation failed (by its type or by its message)."""
    import torch

    oom_types: tuple[type[BaseException], ...] = (MemoryError, torch.cuda.OutOfMemoryError)
    if hasattr(torch, "OutOfMemoryError"):
        oom_types += (torch.OutOfMemoryError,)
    if isinstance(exc, oom_types):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    text = str(exc).lower()
    return any(m in text for m in OOM_MESSAGES)


def describe_failure(exc: BaseException, limit: int = 240) -> str:
    """``Type: first line of the message``, cut to ``limit`` characters."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
