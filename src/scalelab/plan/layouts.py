"""The plan's layouts of the model state: memory per GPU, the batch that fits, the exchange.

For each layout of :mod:`scalelab.theory.zero` (plain DDP, ZeRO-1, ZeRO-2, ZeRO-3) a rank
holds at its peak

    M(layout, b) = state(layout) + buckets + transient(layout) + b x activations/sample

- ``state``: :func:`scalelab.theory.zero.model_state` (the paper's formulas), or exactly
  per rank from the tensors' shapes (:func:`scalelab.theory.zero.rank_state_bytes`);
- ``buckets``: DDP's gradient buckets. Both of this project's DDP runners (plain and
  ZeRO-1) make the gradients views of the buckets (``gradient_as_bucket_view=True``), so
  the buckets are the gradients' memory and add nothing; torch's default
  (``ddp_bucket_copies=True``) copies them, ``g Psi`` more;
- ``transient``: what a sharded layout gathers inside a step
  (:func:`scalelab.theory.zero.transient_bytes`);
- activations per sample: the tensors forward saves for backward
  (:func:`scalelab.profiler.memory.activation_bytes`, on meta tensors for any size), plus
  the input batch.

The largest batch of a layout is ``floor((usable - fixed) / per_sample)`` with the device's
usable memory (:func:`scalelab.theory.memory.usable_bytes`, the margin for fragmentation).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from scalelab.theory import zero
from scalelab.theory.memory import largest_batch, usable_bytes


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
        """Largest batch that fits ``device_memory_bytes`` after the margin (0: none;
        :func:`scalelab.theory.memory.largest_batch` with the layout's fixed bytes)."""
        b = largest_batch(device_memory_bytes, self.fixed_bytes, self.per_sample_bytes)
        if b is None:
            raise ValueError(f"per-sample bytes must be > 0, got {self.per_sample_bytes}")
        return max(0, b)


@dataclass(frozen=True)
class ModelSizes:
    """What the layouts need to know of a model, from its profile or its tensors."""

    shapes: tuple[tuple[int, ...], ...]  # every trainable tensor's shape
    unit_params: tuple[int, ...] = ()  # parameters of each FSDP unit (block)
    per_sample_bytes: float = 0.0  # activations saved for backward + input, per sample
    per_sample_bytes_recompute: float | None = None  # the same with every block recomputed
    # (scalelab.blocks.recompute_saved_bytes); None: not counted
    param_bytes_per_param: float = 4
    grad_bytes_per_param: float = 4
    optimizer_bytes_per_param: float = 4

    @property
    def params(self) -> int:
        return sum(math.prod(s) for s in self.shapes)


def per_sample_bytes(sizes: ModelSizes, recompute: str = "none") -> float:
    """Bytes per sample of a step, plain or with every block recomputed (``full``)."""
    if recompute not in ("none", "full"):
        raise ValueError(f"unknown recompute {recompute!r} (none or full)")
    if recompute == "full" and sizes.per_sample_bytes_recompute is not None:
        return sizes.per_sample_bytes_recompute
    return sizes.per_sample_bytes


def layout_memory(sizes: ModelSizes, ranks: int, layout: str, batch_size: int,
                  rank: int | None = None, ddp_bucket_copies: bool = False,
                  recompute: str = "none", accumulation_steps: int = 1) -> LayoutMemory:
    """The peak of ``layout`` over ``ranks`` at ``batch_size``.

    ``rank=None``: the paper's even split (``Psi / N``); a rank index: exactly what that
    rank holds (tensors sharded on their first dimension, ZeRO-1's whole-tensor placement).
    ``recompute="full"``: activations per sample with every block recomputed;
    ``accumulation_steps`` > 1: ZeRO-2/3 hold whole gradients while accumulating
    (:func:`scalelab.theory.zero.accumulation_grad_bytes`), counted with the transient.
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
    buckets = (sizes.grad_bytes_per_param * sizes.params
               if ddp_bucket_copies and layout in ("ddp", "zero1") and ranks > 1 else 0)
    units = list(sizes.unit_params) or [sizes.params]
    transient = zero.transient_bytes(units, ranks, layout, **kw) + \
        zero.accumulation_grad_bytes(sizes.params, ranks, layout, accumulation_steps,
                                     grad_bytes_per_param=sizes.grad_bytes_per_param)
    return LayoutMemory(layout, ranks, batch_size, state, buckets, transient,
                        per_sample_bytes(sizes, recompute))


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
    """One line: the layout, its memory by component against the device, in GiB."""
    gb = 2**30
    return (f"{zero.LAYOUT_NAMES[m.layout]} on {m.ranks} GPU(s) at batch {m.batch_size}: "
            f"parameters {m.state.param_bytes / gb:.2f} + gradients {m.state.grad_bytes / gb:.2f}"
            f" + optimizer {m.state.optimizer_bytes / gb:.2f} + buckets/gathered "
            f"{(m.bucket_bytes + m.transient_bytes) / gb:.2f} + activations "
            f"{m.activation_bytes / gb:.2f} = {m.total_bytes / gb:.2f} GiB against "
            f"{usable_bytes(device_memory_bytes) / gb:.2f} GiB usable of "
            f"{device_memory_bytes / gb:.2f} GiB")


def sizes_from_components(c: dict) -> ModelSizes:
    """:class:`ModelSizes` from a profile's ``memory_components``
    (:func:`scalelab.profiler.memory.memory_components`)."""
    n = max(int(c["param_count"]), 1)
    shapes = tuple(tuple(int(d) for d in s) for s in c.get("tensor_shapes") or [[n]])
    inputs = float(c.get("input_bytes_per_sample") or 0)
    rec = c.get("activation_bytes_per_sample_recompute")
    return ModelSizes(
        shapes, tuple(int(u) for u in c.get("unit_params") or ()),
        per_sample_bytes=float(c["activation_bytes_per_sample"]) + inputs,
        per_sample_bytes_recompute=None if rec is None else float(rec) + inputs,
        param_bytes_per_param=c["param_bytes"] / n, grad_bytes_per_param=c["grad_bytes"] / n,
        optimizer_bytes_per_param=c["optimizer_bytes"] / n)


@lru_cache(maxsize=32)
def _components_of(model: str, input_shape: tuple[int, ...], num_classes: int) -> dict | None:
    from scalelab.errors import UsageError
    from scalelab.opcache import memory_components
    from scalelab.workload import WorkloadSpec

    try:
        spec = WorkloadSpec(model, input_shape=input_shape, num_classes=num_classes)
        return memory_components(spec)
    except UsageError:
        return None  # a model that cannot be built: no estimate


def sizes_for(inp) -> ModelSizes | None:
    """The model's sizes for a plan input (a PlanInput): from the profile's components,
    else counted on meta tensors from the model it names; None when neither is known."""
    comp = getattr(inp, "memory_components", None)
    if comp is None and inp.model:
        comp = _components_of(str(inp.model), tuple(inp.input_shape), int(inp.num_classes))
    return sizes_from_components(comp) if comp else None


def _ranks_for(sizes: ModelSizes, batch_size: int, device_memory_bytes: float,
               start: int, limit: int = 4096) -> int | None:
    """The fewest ranks (from ``start``) on which ZeRO-3 holds ``batch_size`` per rank."""
    def fits(n: int) -> bool:
        m = layout_memory(sizes, n, "zero3", batch_size)
        return m.total_bytes <= usable_bytes(device_memory_bytes)

    lo, n = max(start, 1), max(start, 1)
    while n <= limit and not fits(n):  # doubling, then the first that fits below it
        lo, n = n + 1, n * 2
    if n > limit:
        return None
    return next(k for k in range(lo, n + 1) if fits(k))


def target_memory_note(inp, batch_size: int, cluster) -> str | None:
    """Whether ``batch_size`` per device fits the target device, from the model's sizes.

    Returns None when it cannot be judged (no target memory in the catalog, no sizes),
    ``""`` when plain data parallelism fits, else one line: what the batch needs against
    the device, the largest batch that fits, and the layout (batch, devices) that fits.
    Whatever device the profile came from: only the model's sizes are used, never the
    batches a profile happened to try.
    """
    from scalelab import hardware

    name = cluster.device or inp.device
    dev = hardware.match_device(name) if name else None
    if dev is None or not dev.memory_bytes:
        return None
    sizes = sizes_for(inp)
    if sizes is None:
        return None
    mem = float(dev.memory_bytes)
    gpus = max(int(cluster.gpus), 1)
    ddp = layout_memory(sizes, gpus, "ddp", batch_size)
    if ddp.total_bytes <= usable_bytes(mem):
        return ""
    largest = ddp.largest_batch(mem)
    head = (f"batch {batch_size} per device does not fit the {dev.name}: "
            + explain(ddp, mem) + (f"; plain data parallelism fits at most batch {largest}"
                                   if largest >= 1 else "; the model does not fit even at "
                                   "batch 1 with plain data parallelism"))
    fit = layout_that_fits(sizes, gpus, batch_size, mem, layouts=zero.LAYOUTS[1:])
    if fit is not None:
        return head + f"; it fits with {explain(fit, mem)}"
    best = max((layout_memory(sizes, gpus, lay, 1) for lay in zero.LAYOUTS),
               key=lambda m: m.largest_batch(mem))
    b = best.largest_batch(mem)
    if b >= 1:
        m = next(d for d in range(min(b, batch_size), 0, -1) if batch_size % d == 0)
        return head + (f"; on {gpus} device(s) no layout holds batch {batch_size}: "
                       f"{zero.LAYOUT_NAMES[best.layout]} holds batch {b} (micro-batches "
                       f"of {m} x {batch_size // m} accumulation steps make {batch_size})")
    n = _ranks_for(sizes, 1, mem, gpus * 2)
    return head + (f"; nothing fits on {gpus} device(s): ZeRO-3 needs {n} devices for "
                   f"batch 1" if n else "; not even ZeRO-3 on 4096 devices holds batch 1")


@dataclass(frozen=True)
class LayoutRow:
    """One layout of the plan: memory, the batch that fits, the exchange and what of it
    shows after compute."""

    layout: str
    memory_bytes: float
    largest_batch: int
    exchange_bytes: float
    exchange_s: float
    exposed_s: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def layout_rows(sizes: ModelSizes, ranks: int, batch_size: int, device_memory_bytes: float,
                bandwidth_Bps: float, forward_s: float, backward_s: float,
                latency_s: float = 0.0) -> list[LayoutRow]:
    """Every layout at ``batch_size`` on ``ranks`` devices of ``device_memory_bytes`` joined
    by links of ``bandwidth_Bps`` (per direction), with forward/backward times of a step.

    Exchange per rank from :func:`scalelab.theory.zero.exchange_bytes`; times from the
    ring collectives of :mod:`scalelab.theory.comm` (all-gather and reduce-scatter per unit,
    DDP's all-reduce) and ZeRO-1's broadcast (:func:`scalelab.theory.zero.zero1_broadcast_s`).
    Exposed: DDP's buckets (:func:`scalelab.theory.comm.ddp_exposed_s`); ZeRO-1 as torch
    runs it, DDP's exposed all-reduce and the owners' broadcast after the optimizer step,
    all exposed; ZeRO-2/3 FSDP2's prefetch (:func:`scalelab.theory.zero.fsdp_step_s`) less
    forward + backward.
    """
    from scalelab.theory.comm import ddp_exposed_s, ring_allgather_s, ring_allreduce_s

    if not bandwidth_Bps > 0:
        raise ValueError(f"bandwidth_Bps must be > 0, got {bandwidth_Bps}")
    n = max(ranks, 1)
    psi = sizes.params
    p_bytes, g_bytes = sizes.param_bytes_per_param * psi, sizes.grad_bytes_per_param * psi
    units = list(sizes.unit_params) or [psi]
    gather_s = ring_allgather_s(p_bytes, n, bandwidth_Bps, latency_s, len(units))
    scatter_s = ring_allgather_s(g_bytes, n, bandwidth_Bps, latency_s, len(units))
    allreduce_s = ring_allreduce_s(g_bytes, n, bandwidth_Bps, latency_s)
    rows = []
    for lay in zero.LAYOUTS:
        mem = layout_memory(sizes, n, lay, batch_size)
        kw = dict(param_bytes_per_param=sizes.param_bytes_per_param,
                  grad_bytes_per_param=sizes.grad_bytes_per_param)
        nbytes = zero.exchange_bytes(psi, n, lay, **kw)
        if n == 1:
            total = exposed = 0.0
        elif lay == "ddp":
            total = allreduce_s
            exposed = ddp_exposed_s(total, backward_s, g_bytes)
        elif lay == "zero1":
            nbytes = zero.zero1_over_ddp_bytes(psi, n, **kw)
            broadcast_s = zero.zero1_broadcast_s(psi, n, bandwidth_Bps, latency_s,
                                                 param_bytes_per_param=sizes.param_bytes_per_param)
            total = allreduce_s + broadcast_s
            exposed = ddp_exposed_s(allreduce_s, backward_s, g_bytes) + broadcast_s
        else:
            reshard = lay == "zero3"
            total = (2 if reshard else 1) * gather_s + scatter_s
            exposed = zero.fsdp_step_s(units, forward_s, backward_s, gather_s, scatter_s,
                                       reshard_after_forward=reshard) - forward_s - backward_s
        rows.append(LayoutRow(lay, mem.total_bytes, mem.largest_batch(device_memory_bytes),
                              nbytes, total, max(exposed, 0.0)))
    return rows
