"""The memory choices for one global batch: micro-batch, accumulation, layout, recompute.

A global batch G (``--global-batch``, or the asked per-device batch times the devices when
it does not fit) is trained as

    G = micro-batch m x accumulation steps K x data-parallel ranks N

exactly: N is the plan's device count, the per-device share ``s = G / N`` (when N does not
divide G the global batch changes to ``N round(G / N)``, and the plan says so), and for
every layout (plain DDP, ZeRO-1/2/3) with and without recomputation the micro-batch is the
largest divisor of s the device holds (:func:`scalelab.plan.layouts.layout_memory`, with
ZeRO-2/3's whole gradients while accumulating), ``K = s / m``. Each is timed per step as

    T = K x T_C(m) x (1 + f if recomputed) + T_IO + E_layout

with T_C(m) the plan's compute at m (:func:`scalelab.plan.layout_types._compute_at`), f
forward's share of the step (:func:`scalelab.theory.memory.recompute_compute_s`) and
E_layout the exchange left after compute (:func:`scalelab.theory.zero.layout_exposed_s`),
once per step. Plain DDP without recomputation is kept unless it does not fit (then the
fastest that fits), or another is faster beyond the band (the plan's band on DDP's rate,
else :data:`scalelab.plan.layout_types.MIN_GAIN`); the reason gives both figures. Without
a step time at other batches, the simplest that fits is taken, not weighed.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalelab.plan import layout_types as lc
from scalelab.plan.layouts import explain, layout_memory
from scalelab.theory import zero
from scalelab.theory.memory import recompute_compute_s, usable_bytes

RECOMPUTES = ("none", "full")


@dataclass(frozen=True)
class Candidate:
    """One way to train ``s`` samples per device per step."""

    layout: str
    recompute: str
    micro_batch: int
    accumulation_steps: int
    memory_bytes: float
    step_s: float | None

    @property
    def name(self) -> str:
        return self.layout + (" + recompute" if self.recompute == "full" else "")

    def text(self, per_device: int) -> str:
        rate = "" if self.step_s is None else f", {per_device / self.step_s:,.1f} samples/s"
        return (f"{self.name} at micro-batch {self.micro_batch} x {self.accumulation_steps} "
                f"({lc.size_text(self.memory_bytes)}{rate})")


def split(global_batch: int, gpus: int) -> tuple[int, int]:
    """(samples per device, the global batch it gives): ``G / N`` when N divides G, else
    the nearest whole share (at least one sample per device)."""
    per = max(1, round(global_batch / gpus))
    return per, per * gpus


def largest_divisor(n: int, at_most: int) -> int:
    """The largest divisor of ``n`` that is at most ``at_most`` (0 when ``at_most`` < 1)."""
    return next((d for d in range(min(n, at_most), 0, -1) if n % d == 0), 0)


def _forward_share(st) -> float | None:
    bf = st.inp.backward_fraction
    return None if bf is None else max(0.0, min(1.0, 1.0 - bf))


def candidate(st, sizes, mem: float, all_rows: dict, gpus: int, per_device: int, layout: str,
              recompute: str, micro: int | None = None) -> Candidate | None:
    """The largest micro-batch dividing ``per_device`` that ``layout`` holds (or ``micro``,
    where the command line fixes it), timed; None when it does not fit."""
    if sizes.per_sample_bytes <= 0:
        return None
    whole = layout_memory(sizes, gpus, layout, per_device, recompute=recompute)
    m = micro or (per_device if whole.total_bytes <= usable_bytes(mem) else largest_divisor(
        per_device, layout_memory(sizes, gpus, layout, 1, recompute=recompute,
                                  accumulation_steps=2).largest_batch(mem)))
    if m < 1:
        return None
    k = per_device // m
    held = layout_memory(sizes, gpus, layout, m, recompute=recompute, accumulation_steps=k)
    if micro and held.total_bytes > usable_bytes(mem):
        return None
    t_c = lc._compute_at(st, m)
    ddp = lc._ddp_exchange(all_rows, gpus)
    step = None
    if t_c is not None and ddp is not None:
        compute = k * t_c
        if recompute == "full":
            compute = recompute_compute_s(compute, _forward_share(st))
        kw = dict(param_bytes_per_param=sizes.param_bytes_per_param,
                  grad_bytes_per_param=sizes.grad_bytes_per_param)
        io_s = st.work.io_s * per_device / st.batch
        step = compute + io_s + zero.layout_exposed_s(layout, *ddp, ranks=gpus, **kw)
    return Candidate(layout, recompute, m, k, held.total_bytes, step)


def _band(st, all_rows: dict, gpus: int) -> tuple[float, str]:
    """The gain another choice must beat: the band's fast end over DDP's rate, else
    :data:`MIN_GAIN`."""
    arch = next((a for a in lc.COLLECTIVES if a in all_rows), None)
    row = all_rows[arch][gpus - 1] if arch else None
    if row is not None and row.samples_per_s_high and row.samples_per_s:
        return row.samples_per_s_high / row.samples_per_s - 1, "the band's fast end"
    return lc.MIN_GAIN, f"{lc.MIN_GAIN:.0%}"


def _fixed_micro(st, per: int) -> int | None:
    """The micro-batch the command line fixes beside --global-batch: --batch-size, or the
    share over --accumulation-steps; a UsageError when it does not divide the share."""
    if not st.options.global_batch:
        return None
    from scalelab.errors import UsageError

    k = st.cluster.accumulation_steps
    m = st.options.batch_size or (per // k if k > 1 else None)
    if m is not None and (per % m or (k > 1 and m * k != per)):
        raise UsageError(f"--global-batch {st.options.global_batch:,} is {per} samples per "
                         f"device: micro-batch {m} x {k} accumulation step(s) does not make it "
                         "(give a --batch-size that divides it, or leave --batch-size and "
                         "--accumulation-steps to the plan)")
    return m


def decide(st, choice, all_rows: dict, max_gpus: int, global_batch: int):
    """The :class:`scalelab.plan.layout_types.LayoutDecision` for ``global_batch`` (module
    docstring); None when the target's memory or the model's activations are unknown."""
    dev, sizes = lc._device_memory(st), lc.model_sizes(st.inp)
    if dev is None or sizes is None or sizes.per_sample_bytes <= 0:
        return None
    name, mem = dev
    gpus = choice.row.gpus
    per, total = split(global_batch, gpus)
    forced_r = st.options.recompute
    micro = _fixed_micro(st, per)
    cands = [c for lay in zero.LAYOUTS for rc in RECOMPUTES
             if forced_r in (None, rc) and (c := candidate(st, sizes, mem, all_rows, gpus, per,
                                                           lay, rc, micro)) is not None]
    head = (f"global batch {total:,} = micro-batch {{m}} x {{k}} accumulation step(s) x "
            f"{gpus} device(s) ({lc.size_text(usable_bytes(mem))} usable of "
            f"{lc.size_text(mem)} per {name})")
    changed = (f"global batch {global_batch:,} does not divide over {gpus} devices: it "
               f"becomes {total:,} ({per} per device)" if total != global_batch else None)
    if not cands:
        return lc.LayoutDecision("zero3", gpus, per, (
            f"nothing holds batch 1 per device on {gpus} {name}: not even ZeRO-3 with "
            "recomputation (more devices, or a smaller model)"), (), fits=False,
            warning=changed)
    base = next((c for c in cands if c.layout == "ddp" and c.recompute == "none"), None)
    timed = [c for c in cands if c.step_s is not None]
    gain, band = _band(st, all_rows, gpus)
    pick, why = _pick(base, cands, timed, gain, band, per)
    reason = (f"layout {pick.layout}, recompute {pick.recompute}: "
              + head.format(m=pick.micro_batch, k=pick.accumulation_steps) + "; " + why
              + "; weighed: " + "; ".join(c.text(per) for c in cands))
    if not st.options.global_batch and pick.accumulation_steps > st.cluster.accumulation_steps:
        whole = layout_memory(sizes, gpus, "ddp", per)
        changed = (f"batch {per} per device does not fit the {name} in one pass: "
                   + explain(whole, mem) + f"; plain data parallelism fits at most batch "
                   f"{max(whole.largest_batch(mem), 0)}: trained as micro-batch "
                   f"{pick.micro_batch} x {pick.accumulation_steps} accumulation steps "
                   f"({pick.name}), the same {per} samples per device per step")
    runnable = None
    batch = pick.micro_batch
    if lc._compute_at(st, pick.micro_batch) is None:  # the figures stay at the plan's batch
        runnable, batch = pick.micro_batch, st.batch
    return lc.LayoutDecision(pick.layout, gpus, batch, reason, (), pick.accumulation_steps,
                             warning=changed, runnable_batch=runnable,
                             recompute=pick.recompute, global_batch=total)


def _pick(base, cands, timed, gain: float, band: str, per: int):
    """The candidate and why (module docstring)."""
    if len(timed) < len(cands):  # no step time at other batches: the simplest that fits
        c = base or cands[0]
        return c, (f"{c.name} is the simplest that holds it (no step time at other batches "
                   "to weigh the others by)")
    fastest = min(timed, key=lambda c: c.step_s)
    if base is None:
        return fastest, (f"plain DDP does not hold batch 1; {fastest.name} is the fastest "
                         "that fits")
    rate_b, rate_f = per / base.step_s, per / fastest.step_s
    if fastest is base or rate_f <= rate_b * (1 + gain):
        return base, (f"plain DDP {rate_b:,.1f} samples/s per device; the fastest other, "
                      f"{fastest.name} {rate_f:,.1f}, is not faster beyond {band} "
                      f"(+{gain:.1%})" if fastest is not base else
                      f"plain DDP is the fastest: {rate_b:,.1f} samples/s per device")
    return fastest, (f"{fastest.name} {rate_f:,.1f} samples/s per device against plain "
                     f"DDP's {rate_b:,.1f} at micro-batch {base.micro_batch} x "
                     f"{base.accumulation_steps}: faster beyond {band} (+{gain:.1%})")
