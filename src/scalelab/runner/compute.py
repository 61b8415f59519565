"""How a worker computes its step: the profile's computation configuration, applied.

``RunConfig.algorithm`` names a configuration as the profile and the plan do
(:mod:`scalelab.profiler.algorithms`: ``default``, ``channels_last``, ``bf16_autocast``,
``fp16_autocast``, ``cudnn_benchmark``, ``tf32``, ``fp32_strict``, joined with ``+``), and
every worker trains in it:

- ``channels_last``: the model's 4-D weights and every 4-D batch in NHWC. Parameter servers
  convert their copy of the model too, so that a piece means the same elements in memory
  order on both sides (:func:`flat`).
- ``bf16_autocast`` / ``fp16_autocast``: forward and loss under ``torch.autocast``; fp16
  trains through a ``GradScaler`` (all-reduce only: loss scaling needs the optimizer beside
  the gradients, and a parameter server applies them elsewhere, so the configuration
  refuses fp16 there).
- ``cudnn_benchmark``, ``tf32``, ``fp32_strict``: backend flags held for the whole run on a
  GPU (:func:`scalelab.profiler.algorithms.backend_flags`); nothing on the CPU.
"""

from __future__ import annotations

import torch
from torch import nn

from scalelab.profiler import algorithms


class Computation:
    """One worker's computation configuration on its device."""

    def __init__(self, name: str, device: torch.device | str):
        self.name = name or "default"
        self.options = algorithms.parse(self.name)
        self.device = torch.device(device)
        self.channels_last = "channels_last" in self.options

    def model(self, module: nn.Module) -> nn.Module:
        """The model in the configuration's memory format (in place for ``nn.Module.to``)."""
        if self.channels_last:
            module = module.to(memory_format=torch.channels_last)
        return module

    def batch(self, x: torch.Tensor) -> torch.Tensor:
        return algorithms.prepare_batch(self.name, x)

    def autocast(self):
        return algorithms.autocast(self.name, self.device)

    def flags(self):
        """Backend flags (cuDNN benchmark, TF32) for the block: hold it around the run."""
        return algorithms.backend_flags(self.name, self.device)

    def scaler(self) -> torch.amp.GradScaler | None:
        return algorithms.grad_scaler(self.name, self.device)


def flat(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view of a dense tensor's elements in memory order (NCHW or NHWC).

    A channels_last weight is not ``contiguous()`` in PyTorch's sense, so ``view(-1)`` refuses
    it; its memory order is the NHWC permutation, which is contiguous.
    """
    if t.is_contiguous():
        return t.view(-1)
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return t.permute(0, 2, 3, 1).view(-1)
    raise ValueError(f"a tensor of shape {tuple(t.shape)} and strides {t.stride()} is neither "
                     "contiguous nor channels_last")
