"""Precision and recomputation of a tensor- or pipeline-parallel run's modules.

- ``fp32``: as built. ``tf32`` (CUDA only): fp32 tensors, TensorFloat-32 matrix products
  (``torch.backends.cuda.matmul.allow_tf32``). ``bf16``: forward under
  ``torch.autocast(dtype=torch.bfloat16)`` (parameters, gradients and the optimizer stay
  fp32; the loss is taken in fp32), on the CPU and CUDA. ``fp16`` (loss scaling) and
  ``fp8`` (torchao's Float8 linears) are not built here: refused in one line.
- ``recompute``: ``full`` recomputes every block's forward in backward
  (``torch.utils.checkpoint``, non-reentrant), keeping only each block's input;
  ``selective`` recomputes each block's attention sub-layer (its projections and the
  attention), keeping the MLP's activations: the attention part that Korthikanti et al.
  (2022) recompute, with its projections. Recomputation repeats the same arithmetic, so it
  changes no number (the pipeline and tensor-parallel tests run with it).

Each is applied by replacing a module's ``forward`` on the instance, so parameter names,
DTensor plans and FSDP2's hooks (which run around ``forward``, in ``__call__``) are those
of the plain model.
"""

from __future__ import annotations

import functools

from scalelab.errors import UsageError

PRECISIONS_RUN = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "tf32", "bf16")}


def check_precision(precision: str, device: str) -> None:
    if precision in PRECISIONS_RUN[device]:
        return
    why = {"fp16": "fp16 needs loss scaling, which is not built for tensor or pipeline "
                   "layouts (use bf16)",
           "fp8": "fp8 linears (torchao) are not built for tensor or pipeline layouts",
           "tf32": "TensorFloat-32 is a GPU's matrix unit (use --device cuda, or fp32)"}
    raise UsageError(f"--precision {precision}: {why.get(precision, 'not built')}"
                     + (f" on {device}" if precision == "tf32" else ""))


def apply_precision(module, precision: str, device_type: str) -> None:
    """Run ``module``'s forward in ``precision`` (see the module docstring)."""
    import torch

    if precision == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if precision != "bf16":
        return
    forward = module.forward

    @functools.wraps(forward)
    def autocast_forward(*args, **kwargs):
        with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
            return forward(*args, **kwargs)

    module.forward = autocast_forward


def _recomputed(module) -> None:
    from torch.utils.checkpoint import checkpoint

    forward = module.forward

    @functools.wraps(forward)
    def recomputed_forward(*args, **kwargs):
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    module.forward = recomputed_forward


def apply_recompute(model, recompute: str) -> None:
    """Recompute each block (``full``) or its attention (``selective``) in backward."""
    if recompute == "none":
        return
    for block in model.blocks.values():
        _recomputed(block if recompute == "full" else block.attn)
