"""Which layout of the model state the recommendation uses: plain DDP, ZeRO-1, -2 or -3.

Plain data parallelism (``ddp``) unless

1. it does not fit the target device at the plan's batch: then the sharded layout that
   fits with the highest efficiency; if none fits on the recommended devices, the fewest
   more devices of the cluster on which one fits; if none fits on the whole cluster, the
   largest batch a layout holds, with gradient accumulation up to the asked batch;
2. or sharding frees enough memory for a larger batch that raises the efficiency (the
   plan's batch was not asked for, the plan's efficiency is below the target, and the
   sharded layout at its largest batch beats DDP at DDP's largest by :data:`MIN_GAIN`).

Memory per GPU of a layout is :func:`scalelab.plan.layouts.layout_memory` against the
device's usable memory (:func:`scalelab.theory.memory.usable_bytes`). Its efficiency at
batch b' on G devices, per exchange of k micro-batches:

    e = T_C(b') / (T_C(b') + T_IO(b') + E_layout)

with T_C(b') the plan's compute on the target scaled by the profile's step-time fit,
T_IO scaled with the batch, and E_layout the exchange left after compute
(:func:`scalelab.theory.zero.layout_exposed_s`: f x DDP's exposed exchange, f the exchange
factor 1 for ZeRO-2 and 1.5 for ZeRO-3; ZeRO-1 DDP's plus its broadcasts) from the sweep's
all-reduce row at G devices. E does not shrink with b' here (more backward to hide behind
would only help): the efficiency at a larger batch is a lower bound.
"""

from __future__ import annotations

import dataclasses
import math

# fewest_devices and run_architecture are named here for advise and recommend
from scalelab.plan.layout_types import (  # noqa: F401
    COLLECTIVES,
    MIN_GAIN,
    LayoutDecision,
    LayoutOption,
    _compute_at,
    _ddp_exchange,
    _device_memory,
    fewest_devices,
    model_sizes,
    run_architecture,
    size_text,
)
from scalelab.plan.layouts import ModelSizes, explain, layout_memory
from scalelab.plan.options import LARGE_BATCH
from scalelab.theory import zero
from scalelab.theory.memory import usable_bytes


def options_at(st, sizes: ModelSizes, memory_bytes: float, all_rows: dict, gpus: int,
               batch: int) -> list[LayoutOption]:
    """Every layout at ``batch`` per device on ``gpus`` devices."""
    limit = usable_bytes(memory_bytes)
    compute = _compute_at(st, batch)
    io_s = st.work.io_s * batch / st.batch
    ddp = _ddp_exchange(all_rows, gpus)
    kw = dict(param_bytes_per_param=sizes.param_bytes_per_param,
              grad_bytes_per_param=sizes.grad_bytes_per_param)
    out = []
    for lay in zero.LAYOUTS:
        m = layout_memory(sizes, gpus, lay, batch)
        largest = m.largest_batch(memory_bytes) if sizes.per_sample_bytes > 0 else None
        exposed = None if ddp is None else zero.layout_exposed_s(lay, *ddp, ranks=gpus, **kw)
        out.append(LayoutOption(lay, gpus, batch, m.total_bytes, limit, largest,
                                zero.exchange_factor(lay, **kw), compute, io_s, exposed))
    return out


def _by_speed(o: LayoutOption) -> tuple[float, int]:
    return (o.efficiency or 0.0, -zero.LAYOUTS.index(o.layout))


def _head(st, name: str, memory_bytes: float, opts: list[LayoutOption]) -> str:
    gpus, batch = opts[0].gpus, opts[0].batch_size
    return (f"on {gpus} {name} at batch {batch} ({size_text(opts[0].usable_bytes)} usable "
            f"of {size_text(memory_bytes)}): " + "; ".join(o.text() for o in opts))


def choose(st, choice, all_rows: dict, max_gpus: int) -> LayoutDecision | None:
    """The layout for the recommendation (module docstring); None when the target's memory
    is unknown (nothing to judge by), unless the options name a layout: then that one,
    unjudged."""
    dev = _device_memory(st)
    sizes = model_sizes(st.inp)
    if dev is None or sizes is None:
        if st.options.layout:  # named, with nothing to judge its memory by (a CPU profile)
            lay = zero.check_layout(st.options.layout)
            return LayoutDecision(lay, choice.row.gpus, st.batch, f"layout {lay} as asked "
                                  "(the device's memory is unknown: not judged)", (),
                                  st.cluster.accumulation_steps)
        return None
    name, mem = dev
    g, b = choice.row.gpus, st.batch
    big = st.options.global_batch
    if big and st.options.layout and st.options.batch_size:  # a decided global batch
        return _pinned(st, sizes, dev, all_rows, max_gpus, big)
    at = options_at(st, sizes, mem, all_rows, g, b)
    if st.options.layout:
        return _forced(st, sizes, dev, all_rows, max_gpus, at)
    ddp = at[0]
    if big or not ddp.fits:  # micro-batch x accumulation x ranks, layout and recompute
        from scalelab.plan.global_batch import decide

        d = decide(st, choice, all_rows, max_gpus,
                   big or g * b * st.cluster.accumulation_steps)
        if d is not None:
            return d
    if ddp.fits:
        return _maybe_larger_batch(st, sizes, dev, all_rows, at) or LayoutDecision(
            "ddp", g, b, "layout ddp (no sharding): it fits, "
            + explain(layout_memory(sizes, g, "ddp", b), mem), tuple(at))
    why = "without sharding it does not fit: " + explain(layout_memory(sizes, g, "ddp", b), mem)
    for gpus in range(g, max_gpus + 1):
        here = at if gpus == g else options_at(st, sizes, mem, all_rows, gpus, b)
        fitting = [o for o in here[1:] if o.fits]
        if fitting:
            best = max(fitting, key=_by_speed)
            more = "" if gpus == g else f" on {gpus} devices (the fewest of the cluster's)"
            return LayoutDecision(best.layout, gpus, b, f"layout {best.layout}: {why}; "
                                  f"{zero.LAYOUT_NAMES[best.layout]} fits{more}, the fastest "
                                  f"that fits; " + _head(st, name, mem, here), tuple(here))
    return _smaller_batch(st, sizes, dev, all_rows, max_gpus, why)


def _smaller_batch(st, sizes, dev, all_rows, max_gpus: int, why: str) -> LayoutDecision:
    """No layout holds the batch on the cluster: the largest batch a layout holds on all
    its devices, accumulated up to the asked batch; or, when none holds batch 1, ZeRO-3 and
    how many devices it needs."""
    from scalelab.plan.layouts import _ranks_for

    name, mem = dev
    at = options_at(st, sizes, mem, all_rows, max_gpus, st.batch)
    held = [(o.largest_batch or 0, o) for o in at]
    top = max(b for b, _ in held)
    if sizes.per_sample_bytes > 0 and top >= 1:
        batch = top
        lay = max((o for b, o in held if b == top), key=_by_speed).layout
        k = math.ceil(st.batch / batch)
        if _compute_at(st, batch) is None:  # no step-time fit: the batch cannot be re-planned
            return LayoutDecision(lay, max_gpus, st.batch, (
                f"layout {lay}: {why}; no layout holds batch {st.batch} on the cluster's "
                f"{max_gpus} devices: {zero.LAYOUT_NAMES[lay]} holds batch {batch} "
                f"(gradient accumulation of {k} steps); give the step time at batch {batch} "
                "(a profile, or a workload file measured there) to plan it; "
                + _head(st, name, mem, at)), tuple(at), fits=False, runnable_batch=batch)
        return LayoutDecision(lay, max_gpus, batch, (
            f"layout {lay}: {why}; no layout holds batch {st.batch} on the cluster's "
            f"{max_gpus} devices: {zero.LAYOUT_NAMES[lay]} holds batch {batch} "
            f"(gradient accumulation of {k} steps for {batch * k} samples per device "
            f"between exchanges); " + _head(st, name, mem, at)), tuple(at),
            accumulation_steps=k, warning=(
                f"batch {st.batch} per device does not fit the {name} in any layout on "
                f"{max_gpus} devices: planned at batch {batch} with {lay} and gradient "
                f"accumulation of {k} steps"))
    n = _ranks_for(sizes, 1 if sizes.per_sample_bytes > 0 else st.batch, mem, max_gpus + 1)
    need = f"ZeRO-3 needs {n} devices" if n else "not even ZeRO-3 on 4096 devices holds it"
    return LayoutDecision("zero3", max_gpus, st.batch, (
        f"layout zero3: {why}; nothing fits on the cluster's {max_gpus} {name} devices: "
        f"{need} for batch 1; " + _head(st, name, mem, at)), tuple(at), fits=False)


def _maybe_larger_batch(st, sizes, dev, all_rows, at) -> LayoutDecision | None:
    """Case 2 of the module docstring: a sharded layout at a larger batch, or None."""
    name, mem = dev
    ddp = at[0]
    e_now = ddp.efficiency
    if (st.options.batch_size or sizes.per_sample_bytes <= 0 or e_now is None
            or e_now >= st.options.target_efficiency or _compute_at(st, st.batch + 1) is None):
        return None
    g, b = ddp.gpus, ddp.batch_size
    cap = max(b, LARGE_BATCH // g)
    b_ddp = max(b, min(ddp.largest_batch or 0, cap))
    base = options_at(st, sizes, mem, all_rows, g, b_ddp)[0]
    best = None
    for o in at[1:]:
        b_lay = min(o.largest_batch or 0, cap)
        if b_lay <= b_ddp:
            continue
        cand = options_at(st, sizes, mem, all_rows, g, b_lay)[zero.LAYOUTS.index(o.layout)]
        if best is None or _by_speed(cand) > _by_speed(best):
            best = cand
    if best is None or best.efficiency is None or \
            best.efficiency < (base.efficiency or 0.0) + MIN_GAIN:
        return None
    others = options_at(st, sizes, mem, all_rows, g, best.batch_size)
    return LayoutDecision(best.layout, g, best.batch_size, (
        f"layout {best.layout}: efficiency {e_now:.2f} at batch {b} is below the target "
        f"{st.options.target_efficiency:g}; plain data parallelism holds at most batch "
        f"{b_ddp} (efficiency {base.efficiency:.2f}), {zero.LAYOUT_NAMES[best.layout]} "
        f"frees memory for batch {best.batch_size}: efficiency {best.efficiency:.2f}; "
        + _head(st, name, mem, others)), tuple(others))


def _forced(st, sizes, dev, all_rows, max_gpus: int, at) -> LayoutDecision:
    """The layout the options name (a re-plan at a decided batch): its figures here, on
    the recommended devices or the fewest more on which it fits."""
    name, mem = dev
    lay = zero.check_layout(st.options.layout)
    g = at[0].gpus
    for gpus in range(g, max_gpus + 1):
        here = at if gpus == g else options_at(st, sizes, mem, all_rows, gpus, st.batch)
        o = here[zero.LAYOUTS.index(lay)]
        if o.fits:
            return LayoutDecision(lay, gpus, st.batch, f"layout {lay} at batch {st.batch}: "
                                  + _head(st, name, mem, here), tuple(here),
                                  st.cluster.accumulation_steps)
    return LayoutDecision(lay, g, st.batch, f"layout {lay} does not fit at batch {st.batch}: "
                          + _head(st, name, mem, at), tuple(at),
                          st.cluster.accumulation_steps, fits=False)


def _pinned(st, sizes, dev, all_rows, max_gpus: int, global_batch: int) -> LayoutDecision:
    """The re-plan of a decided global batch: its micro-batch, accumulation and layout on
    the devices that make it, ``G / (m K)``."""
    name, mem = dev
    k = st.cluster.accumulation_steps
    gpus = max(1, min(max_gpus, global_batch // (st.batch * k)))
    here = options_at(st, sizes, mem, all_rows, gpus, st.batch)
    return LayoutDecision(st.options.layout, gpus, st.batch, (
        f"layout {st.options.layout} at micro-batch {st.batch} x {k}: "
        + _head(st, name, mem, here)), tuple(here), k, recompute=st.options.recompute or "none",
        global_batch=gpus * st.batch * k)


def needs_replan(st, decided: LayoutDecision | None) -> bool:
    """Whether the plan must be made again at the decision's micro-batch, accumulation or
    recomputation (a batch the plan has no step time for is launched, not re-planned)."""
    return decided is not None and decided.runnable_batch is None and (
        decided.batch_size != st.batch
        or decided.accumulation_steps != st.cluster.accumulation_steps
        or decided.recompute != (st.options.recompute or "none"))


def judged_input(inp):
    """``inp`` with no largest batch when its memory components are known: the memory of
    every layout is then judged on the target (:func:`choose`), and the profiled device's
    largest batch (plain, one process) no longer refuses a batch before that."""
    if getattr(inp, "memory_components", None) and inp.max_batch_size:
        return dataclasses.replace(inp, max_batch_size=None)
    return inp


def apply(choice, all_rows: dict, decision: LayoutDecision | None):
    """The plan's choice under ``decision``: a sharded layout runs collectives (the sweep's
    all-reduce row at the decided devices), with its step, throughput and efficiency."""
    from scalelab.plan.choice import Choice

    if decision is None or not decision.fits or (decision.layout == "ddp"
                                                  and decision.gpus == choice.row.gpus):
        return choice  # nothing fits: the figures stay the asked configuration's
    arch = next((a for a in COLLECTIVES if a in all_rows), None)  # FSDP's flat collectives
    if arch is None:
        return choice
    row = all_rows[arch][decision.gpus - 1]
    o = decision.option()
    if o is not None and o.efficiency is not None and decision.layout != "ddp":
        step_s = o.compute_s + o.io_s + o.exposed_s
        scale = row.step_s / step_s if step_s > 0 else 1.0
        rate = decision.gpus * decision.batch_size * decision.accumulation_steps / step_s
        row = dataclasses.replace(
            row, step_s=step_s, samples_per_s=rate, efficiency=o.efficiency,
            speedup=o.efficiency * decision.gpus, comm_s=row.comm_s * o.exchange_factor,
            overhead_ratio=(step_s - o.compute_s) / o.compute_s,
            samples_per_s_low=row.samples_per_s_low and row.samples_per_s_low * scale,
            samples_per_s_high=row.samples_per_s_high and row.samples_per_s_high * scale)
    same = arch == choice.architecture  # the cluster's name holds only for its architecture
    return Choice(arch, row, {**choice.best, arch: row}, named=choice.named and same,
                  faster=choice.faster if choice.faster != arch else None,
                  below_target=choice.below_target and same,
                  simpler_than=choice.simpler_than if same else None)


def replan_inputs(inp, cluster, options, decision: LayoutDecision):
    """(input, cluster, options) of the plan at the decided batch, with the layout named:
    the profiled device's largest batch does not bound a sharded layout's."""
    inp2 = dataclasses.replace(inp, max_batch_size=None)
    cluster2 = dataclasses.replace(cluster, accumulation_steps=decision.accumulation_steps)
    options2 = dataclasses.replace(options, batch_size=decision.batch_size,
                                   layout=decision.layout, recompute=decision.recompute,
                                   global_batch=decision.global_batch or options.global_batch)
    return inp2, cluster2, options2


def with_first_reason(p, decision: LayoutDecision):
    """The re-planned plan with the decision that changed the batch as its first reason."""
    from scalelab.plan.reasons import Reason

    rec = p.recommendation
    batch = Reason("batch", f"batch_size {decision.batch_size}: chosen with the layout"
                   + (f", gradient accumulation of {decision.accumulation_steps} steps"
                      if decision.accumulation_steps > 1 else ""))
    kept = tuple(r for r in rec.reasons if not (r.topic == "batch" and "as asked" in r.text)
                 and not (r.topic == "memory" and r.text.startswith("layout ")))
    rec = dataclasses.replace(rec, reasons=(batch, Reason("memory", decision.reason), *kept),
                              layout_reason=decision.reason + "; " + (rec.layout_reason or ""))
    warnings = ((Reason("memory", decision.warning),) if decision.warning else ()) + \
        tuple(p.warnings)
    return dataclasses.replace(p, recommendation=rec, warnings=warnings)
