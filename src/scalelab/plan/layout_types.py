"""The layout choice's values and the facts it reads: a layout at a batch and device count
(:class:`LayoutOption`), the decision (:class:`LayoutDecision`), the target's memory, the
plan's compute at another batch and DDP's exchange; and the fewest devices a model needs
(:func:`fewest_devices`). Used by :mod:`scalelab.plan.layout_choice` and
:mod:`scalelab.plan.global_batch`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from scalelab.plan.layouts import ModelSizes, layout_memory, sizes_for
from scalelab.theory import zero
from scalelab.theory.memory import usable_bytes

MIN_GAIN = 0.02
"""Efficiency a sharded layout at a larger batch must add over DDP at DDP's largest batch."""
COLLECTIVES = ("allreduce", "hierarchical")
"""Architectures whose sweep rows give DDP's exchange (sharded layouts run collectives)."""
GIB = 2**30


def run_architecture(layout: str) -> str:
    """``scalelab run --architecture``'s value for a layout: ``allreduce`` for plain DDP,
    ``fsdp --zero N`` for ZeRO-N (the one place the launch commands take it from)."""
    return "allreduce" if zero.check_layout(layout) == "ddp" else f"fsdp --zero {layout[-1]}"


def size_text(n: float) -> str:
    """Bytes for a reader: GiB from 1 GiB up, MiB below (a small device budget)."""
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 2**20:.2f} MiB"


@dataclass(frozen=True)
class LayoutOption:
    """One layout at one batch and device count: its memory, whether it fits, its speed."""

    layout: str
    gpus: int
    batch_size: int
    memory_bytes: float
    usable_bytes: float
    largest_batch: int | None
    """Largest batch that fits on ``gpus`` devices (None: activations unknown)."""
    exchange_factor: float
    compute_s: float | None = None
    """T_C per exchange at ``batch_size`` on the target (None: no step-time fit)."""
    io_s: float = 0.0
    exposed_s: float | None = None
    """Exchange left after compute (None: no collective row to read it from)."""

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.usable_bytes

    @property
    def efficiency(self) -> float | None:
        if self.compute_s is None or self.exposed_s is None:
            return None
        return self.compute_s / (self.compute_s + self.io_s + self.exposed_s)

    def text(self) -> str:
        e = self.efficiency
        eff = "" if e is None else (
            f", efficiency {self.compute_s * 1e3:.1f} / ({self.compute_s * 1e3:.1f} + "
            f"{self.io_s * 1e3:.1f} + {self.exposed_s * 1e3:.1f}) ms = {e:.2f}")
        return (f"{self.layout} {size_text(self.memory_bytes)}"
                f"{'' if self.fits else ' (does not fit)'}, exchange x{self.exchange_factor:g}"
                + eff)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(fits=self.fits, efficiency=self.efficiency)
        return d


@dataclass(frozen=True)
class LayoutDecision:
    """The layout the recommendation uses, at which batch and device count, and why."""

    layout: str
    gpus: int
    batch_size: int
    reason: str
    options: tuple[LayoutOption, ...] = ()
    """Every layout at the decided batch and device count."""
    accumulation_steps: int = 1
    fits: bool = True
    warning: str | None = None
    """What the reader must know when the decision changed the asked batch."""
    runnable_batch: int | None = None
    """When the layout does not hold ``batch_size`` and the plan cannot move to a batch it
    holds (no step time there): that batch, for the launch command."""
    recompute: str = "none"
    """Activation checkpointing per block: none | full (:mod:`scalelab.plan.global_batch`)."""
    global_batch: int | None = None
    """Samples per optimizer step over all devices when the decision keeps one exactly."""

    @property
    def launch_batch(self) -> int:
        return self.runnable_batch or self.batch_size

    @property
    def zero_level(self) -> int | None:
        return None if self.layout == "ddp" else int(self.layout[-1])

    def option(self) -> LayoutOption | None:
        return next((o for o in self.options if o.layout == self.layout), None)

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.layout, "gpus": self.gpus, "batch_size": self.batch_size,
                "accumulation_steps": self.accumulation_steps, "fits": self.fits,
                "recompute": self.recompute, "global_batch": self.global_batch,
                "reason": self.reason, "options": [o.to_dict() for o in self.options]}


def model_sizes(inp) -> ModelSizes | None:
    """The model's sizes (:func:`scalelab.plan.layouts.sizes_for`); for a workload file
    that gives only ``param_bytes``, fp32 parameters and gradients and SGD's momentum
    (``scalelab run``'s optimizer), activations unknown (the state alone is judged) and
    no FSDP units known (the whole model is one unit: the most a sharded rank gathers)."""
    sizes = sizes_for(inp)
    if sizes is not None:
        return sizes
    params = max(int(inp.param_bytes // 4), 1)
    return ModelSizes(((params,),))


def _device_memory(st) -> tuple[str, float] | None:
    from scalelab import hardware

    name = st.cluster.device or st.inp.device
    dev = hardware.match_device(name) if name else None
    if dev is None or not dev.memory_bytes:
        return None
    return dev.name, float(dev.memory_bytes)


def _compute_at(st, batch: int) -> float | None:
    """T_C per exchange at ``batch`` on the target: the plan's, scaled by the step fit; where
    the plan chose the batch for the target (:mod:`scalelab.plan.target`, no fit), the
    target's compute model at ``batch`` (:func:`scalelab.plan.compute.target_compute`)."""
    if batch == st.batch:
        return st.work.compute_s
    fit = st.inp.fit_step_s
    if fit is None and getattr(st.options, "target", None) is not None:
        from scalelab.plan.compute import target_compute

        tc = target_compute(st.inp, st.inp.step_s, batch, st.cluster, st.options,
                            st.inp.batch_size)
        return st.cluster.accumulation_steps * tc.compute_s
    if fit is None:
        return None
    a, per = fit
    here, there = a + per * st.batch, a + per * batch
    if not (here > 0 and there > 0):
        return None
    return st.work.compute_s * there / here


def _ddp_exchange(all_rows: dict, gpus: int) -> tuple[float, float] | None:
    """(exposed, all-reduce) seconds of DDP at ``gpus`` from the sweep's collective row."""
    arch = next((a for a in COLLECTIVES if a in all_rows), None)
    if arch is None:
        return None
    r = all_rows[arch][gpus - 1]
    return max(r.step_s - r.compute_s - r.io_s, 0.0), r.comm_s


def _fewest(sizes: ModelSizes, layout: str, batch: int, limit_bytes: float,
            most: int) -> int | None:
    """The fewest ranks (up to ``most``) on which ``layout`` holds ``batch`` per rank."""
    def fits(n: int) -> bool:
        return layout_memory(sizes, n, layout, batch).total_bytes <= limit_bytes

    if fits(1):
        return 1
    if layout == "ddp":
        return None  # every rank holds everything: more ranks do not help
    lo, n = 2, 2
    while n <= most and not fits(n):  # doubling, then the first that fits below it
        lo, n = n + 1, n * 2
    if n > most:
        n = most
        if not fits(n):
            return None
    return next(k for k in range(lo, n + 1) if fits(k))


def fewest_devices(sizes: ModelSizes, memory_bytes: float, batch_size: int = 1,
                   most: int = 4096) -> LayoutDecision | None:
    """The layout, devices and batch for a model on devices of ``memory_bytes`` each, from
    its memory alone: the fewest devices on which a layout holds ``batch_size`` per device
    (the least sharding at that count), then the largest batch that layout holds there.
    None when not even ZeRO-3 on ``most`` devices holds it."""
    limit = usable_bytes(memory_bytes)
    counts = {lay: _fewest(sizes, lay, batch_size, limit, most) for lay in zero.LAYOUTS}
    found = [(n, zero.LAYOUTS.index(lay), lay) for lay, n in counts.items() if n]
    if not found:
        return None
    n, _, lay = min(found)
    m = layout_memory(sizes, n, lay, batch_size)
    batch = m.largest_batch(memory_bytes) if sizes.per_sample_bytes > 0 else batch_size
    opts = []
    for other in zero.LAYOUTS:
        o = layout_memory(sizes, n, other, batch)
        opts.append(LayoutOption(other, n, batch, o.total_bytes, limit,
                                 o.largest_batch(memory_bytes)
                                 if sizes.per_sample_bytes > 0 else None,
                                 zero.exchange_factor(
                                     other, param_bytes_per_param=sizes.param_bytes_per_param,
                                     grad_bytes_per_param=sizes.grad_bytes_per_param)))
    plain = layout_memory(sizes, 1, "ddp", batch_size)
    need = ", ".join(f"{lay} on {counts[lay]}" if counts[lay] else f"{lay} on none"
                     for lay in zero.LAYOUTS)
    reason = (f"layout {lay} on {n} devices at batch {batch}: one device holds "
              f"{size_text(plain.total_bytes)} at batch {batch_size} without sharding "
              f"against {size_text(limit)} usable of {size_text(memory_bytes)}; fewest "
              f"devices for batch {batch_size}: {need}; on {n}: "
              + "; ".join(o.text() for o in opts)
              + f"; {batch} is the largest batch {lay} holds there")
    return LayoutDecision(lay, n, batch, reason, tuple(opts))
