"""The plan's layouts of the model state: memory per GPU, the batch that fits, the exchange.

For each layout of :mod:`scalelab.theory.zero` (plain DDP, ZeRO-1, ZeRO-2, ZeRO-3) a rank
holds at its peak

    M(layout, b) = state(layout) + buckets + transient(layout) + b x activations/sample

- ``state``: :func:`scalelab.theory.zero.model_state` (the paper's formulas), or exactly
  per rank from the tensors' shapes (:func:`scalelab.theory.zero.rank_state_bytes`);
- ``buckets``: plain DDP copies the gradients into its buckets (torch's default,
  ``gradient_as_bucket_view=False``): ``g Psi`` more; the ZeRO-1 runner lets the gradients
  be views of the buckets (:mod:`scalelab.runner.fsdp`), so none;
- ``transient``: what a sharded layout gathers inside a step
  (:func:`scalelab.theory.zero.transient_bytes`);
- activations per sample: the tensors forward saves for backward
  (:func:`scalelab.profiler.memory.activation_bytes`, on meta tensors for any size), plus
  the input batch.

The largest batch of a layout is ``floor((usable - fixed) / per_sample)`` with the device's
usable memory (:func:`scalelab.theory.memory.usable_bytes`, the margin for fragmentation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scalelab.theory import zero
from scalelab.theory.memory import usable_bytes


@dataclass(frozen=True)
class LayoutMemory:
    """Peak bytes one rank of ``layout`` holds at ``batch_size``, by component."""

    layout: str
    ranks: int
    batch_size: int
    state: zero.ModelState
    bucket_bytes: float
    transient_bytes: float
    per_sample_bytes: float

    @property
    def fixed_bytes(self) -> float:
        return self.state.total_bytes + self.bucket_bytes + self.transient_bytes

    @property
    def activation_bytes(self) -> float:
        return self.batch_size * self.per_sample_bytes

    @property
    def total_bytes(self) -> float:
        return self.fixed_bytes + self.activation_bytes

    def largest_batch(self, device_memory_bytes: float) -> int:
        """Largest batch that fits ``device_memory_bytes`` after the margin (0: none)."""
        return zero.largest_batch(usable_bytes(device_memory_bytes), self.fixed_bytes, 0.0,
                                  self.per_sample_bytes)


@dataclass(frozen=True)
class ModelSizes:
    """What the layouts need to know of a model, from its profile or its tensors."""

    shapes: tuple[tuple[int, ...], ...]  # every trainable tensor's shape
    unit_params: tuple[int, ...] = ()  # parameters of each FSDP unit (block)
    per_sample_bytes: float = 0.0  # activations saved for backward + input, per sample
    param_bytes_per_param: float = 4
    grad_bytes_per_param: float = 4
    optimizer_bytes_per_param: float = 4

    @property
    def params(self) -> int:
        return sum(math.prod(s) for s in self.shapes)


def layout_memory(sizes: ModelSizes, ranks: int, layout: str, batch_size: int,
                  rank: int | None = None) -> LayoutMemory:
    """The peak of ``layout`` over ``ranks`` at ``batch_size``.

    ``rank=None``: the paper's even split (``Psi / N``); a rank index: exactly what that
    rank holds (tensors sharded on their first dimension, ZeRO-1's whole-tensor placement).
    """
    zero.check_layout(layout)
    kw = dict(param_bytes_per_param=sizes.param_bytes_per_param,
              grad_bytes_per_param=sizes.grad_bytes_per_param)
    if rank is None:
        state = zero.model_state(sizes.params, ranks, layout,
                                 optimizer_bytes_per_param=sizes.optimizer_bytes_per_param, **kw)
    else:
        state = zero.rank_state_bytes(sizes.shapes, ranks, rank, layout, between_steps=False,
                                      optimizer_bytes_per_param=sizes.optimizer_bytes_per_param,
                                      **kw)
    buckets = sizes.grad_bytes_per_param * sizes.params if layout == "ddp" and ranks > 1 else 0
    units = list(sizes.unit_params) or [sizes.params]
    transient = zero.transient_bytes(units, ranks, layout, **kw)
    return LayoutMemory(layout, ranks, batch_size, state, buckets, transient,
                        sizes.per_sample_bytes)


def all_layouts(sizes: ModelSizes, ranks: int, batch_size: int) -> list[LayoutMemory]:
    return [layout_memory(sizes, ranks, lay, batch_size) for lay in zero.LAYOUTS]


def layout_that_fits(sizes: ModelSizes, ranks: int, batch_size: int,
                     device_memory_bytes: float,
                     layouts: Sequence[str] = zero.LAYOUTS) -> LayoutMemory | None:
    """The first of ``layouts`` (least sharding first) whose peak at ``batch_size`` fits."""
    limit = usable_bytes(device_memory_bytes)
    for lay in layouts:
        m = layout_memory(sizes, ranks, lay, batch_size)
        if m.total_bytes <= limit:
            return m
    return None


def explain(m: LayoutMemory, device_memory_bytes: float) -> str:
    """One line: the layout, its memory by component against the device, in GB."""
    gb = 1e9
    return (f"{zero.LAYOUT_NAMES[m.layout]} on {m.ranks} GPU(s) at batch {m.batch_size}: "
            f"parameters {m.state.param_bytes / gb:.2f} + gradients {m.state.grad_bytes / gb:.2f}"
            f" + optimizer {m.state.optimizer_bytes / gb:.2f} + buckets/gathered "
            f"{(m.bucket_bytes + m.transient_bytes) / gb:.2f} + activations "
            f"{m.activation_bytes / gb:.2f} = {m.total_bytes / gb:.2f} GB against "
            f"{usable_bytes(device_memory_bytes) / gb:.2f} GB usable of "
            f"{device_memory_bytes / gb:.2f} GB")
