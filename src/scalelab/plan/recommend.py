"""Profile + cluster -> plan: the predicted sweep and one recommendation, with reasons.

:func:`plan` sweeps every architecture over the cluster's device counts
(:mod:`scalelab.plan.sweep`), takes per architecture the most devices that keep the target
efficiency, recommends the fastest, and explains each figure of the recommendation in a
:class:`~scalelab.plan.reasons.Reason` (batch, devices, servers, bandwidth, loaders, cost).

Python use::

    from scalelab.plan import Cluster, PlanOptions, load_workload, plan
    p = plan(load_workload("workload.toml"),
             Cluster(nodes=4, gpus_per_node=8, device="A100-SXM-80GB", network="100GbE"))
    p.recommendation.gpus, p.to_dict()["sweep"][0]

Bandwidth: a network named from the catalog counts at its per-direction payload rate
(``payload_gbps``: after line coding and TCP/RDMA framing); ``network_gbps=X`` is taken as
X Gb/s of payload (1 Gb/s = 125e6 B/s). The paper's server counts (183 on 1GbE, 19 on
10GbE, 4 on 56 Gb/s InfiniBand for AlexNet) use the nominal rate, i.e. ``network_gbps``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import scalelab.plan.advice as advice
import scalelab.plan.choice as choosing
import scalelab.plan.layout_choice as layout_choice
import scalelab.plan.target as target_choice
from scalelab import hardware
from scalelab.errors import UsageError
from scalelab.plan.cluster import Cluster
from scalelab.plan.compute import (
    TargetCompute,
    memory_check,
    precision_of,
    source_precision,
    target_compute,
)
from scalelab.plan.inputs import PlanInput, load_input
from scalelab.plan.launch_line import launch_command
from scalelab.plan.options import LARGE_BATCH, PlanOptions, check_layout_architecture
from scalelab.plan.reasons import Notes, Reason
from scalelab.plan.step import ARCHITECTURES, ModelParams, StepWorkload
from scalelab.plan.sweep import SweepRow, device_counts, sweep_architecture
from scalelab.text import format_s
from scalelab.theory import io as theory_io
from scalelab.theory import topology
from scalelab.theory.band import ErrorBand, combine, relative_band
from scalelab.theory.memory import recompute_compute_s


@dataclass(frozen=True)
class Recommendation:
    """The configuration to use (plan.json's ``recommendation``)."""

    batch_size: int
    """b: per-device minibatch."""
    algorithm: str | None
    """Computation configuration (channels_last, autocast precision, ...)."""
    architecture: str
    """ps | allreduce | hierarchical."""
    gpus: int
    """G: devices to use."""
    num_ps: int
    """Parameter servers (0 when the architecture has none)."""
    num_ps_min: int
    """The lemma's minimum number of servers at that scale."""
    network_gbps_needed: float
    """Per-node NIC payload per direction that keeps the target at the full size, Gb/s."""
    loader_workers: int
    """Input loader processes per device."""
    reasons: tuple[Reason, ...]
    """Why, one sentence per figure."""
    intra_node_gbps_needed: float = 0.0
    """In-node link per direction needed at the full size, Gb/s."""
    samples_per_s: float = 0.0
    """Predicted throughput at ``gpus``."""
    efficiency: float = 1.0
    """Predicted efficiency at ``gpus``."""
    cost_per_1k_samples: float | None = None
    """Price of 1,000 samples at ``gpus``, when the cluster has a price."""
    servers_per_node: tuple[int, ...] = ()
    """Colocated servers on each node used, node 0 first (empty: none, or dedicated)."""
    cheapest: dict[str, Any] | None = None
    """The cheapest configuration meeting the target, when priced."""
    alternatives: tuple[choosing.Alternative, ...] = ()
    """The device counts a user weighs: the whole cluster, one node, the target's choice."""
    launch: str = ""
    """A command that runs the recommendation."""
    too_small: str | None = None
    """Set when one step is too short for the cluster to matter (the figures are bounds)."""
    samples_per_s_low: float | None = None
    """Throughput at the band's slow end (None: no band)."""
    samples_per_s_high: float | None = None
    """Throughput at the band's fast end."""
    layout: str = "ddp"
    """Model-state layout: ddp | zero1 | zero2 | zero3 (:mod:`scalelab.plan.layout_choice`)."""
    layout_reason: str | None = None
    """Why that layout: each layout's memory per GPU against the device, its efficiency."""
    layouts: tuple[dict[str, Any], ...] = ()
    """Every layout at the recommended batch and devices (memory, fits, efficiency)."""
    micro_batch: int | None = None
    """Samples per device per forward and backward (``batch_size``; None: unknown)."""
    accumulation: int = 1
    """Micro-batches per exchange (gradient accumulation)."""
    global_batch: int | None = None
    """Samples per optimizer step over all devices: micro_batch x accumulation x gpus."""
    recompute: str = "none"
    """Activation checkpointing per block: none | full (:mod:`scalelab.plan.global_batch`)."""
    precision: str | None = None
    """The precision the target computes in (fp32 | tf32 | bf16 | fp16; None: as measured
    on a device the catalog does not know)."""
    channels_last: bool = False
    """Whether the run trains in channels_last."""
    target: dict[str, Any] | None = None
    """How the batch and the precision were chosen for the target device: the throughput
    against batch at each precision weighed, the host time and its band
    (:class:`scalelab.plan.target.TargetChoice`); None where the measurement decided."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["reasons"] = [r.text for r in self.reasons]
        d["notes"] = [r.to_dict() for r in self.reasons]
        d["alternatives"] = [a.to_dict() for a in self.alternatives]
        return d


@dataclass(frozen=True)
class Plan:
    """A plan: its inputs, the sweep, the recommendation and the warnings (plan.json)."""

    inputs: dict[str, Any]
    """What the plan was computed from (input, cluster, options, links)."""
    sweep: tuple[SweepRow, ...]
    """Predicted rows per architecture and device count."""
    recommendation: Recommendation
    """What to use."""
    warnings: tuple[Reason, ...]
    """What the reader must know before trusting the figures."""
    estimate: bool
    """True when compute time was estimated, not measured: for another device, or for
    another precision on the device it was measured on (``estimate_of``)."""
    params: ModelParams
    """The step model's parameters (neutral, or calibrated)."""
    ps_sizing: advice.PsSizing | None = None
    """Servers for the ps architecture: at the recommendation, or at full size as a what-if."""
    band: ErrorBand | None = None
    """measured/predicted range every predicted step carries (None: no evidence for one)."""
    estimate_of: str | None = None
    """What an estimate carried the measurement across: "device" or "precision" (None:
    measured)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "band": self.band.to_dict() if self.band else None,
            "ps_sizing": self.ps_sizing.to_dict() if self.ps_sizing else None,
            "inputs": self.inputs,
            "estimate": self.estimate,
            "estimate_of": self.estimate_of,
            "model_params": self.params.to_dict(),
            "sweep": [r.to_dict() for r in self.sweep],
            "recommendation": self.recommendation.to_dict(),
            "warnings": [w.text for w in self.warnings],
        }


@dataclass(frozen=True)
class _Setting:
    """What every part of the recommendation reads: the step's inputs at the chosen batch."""

    inp: PlanInput
    cluster: Cluster
    options: PlanOptions
    params: ModelParams
    batch: int
    measured_step_s: float
    work: StepWorkload
    loaders: int
    loaders_needed: int
    derive_overlap: bool

    @property
    def samples_per_exchange(self) -> int:
        """Samples one device contributes between two exchanges: b x accumulation steps."""
        return self.batch * self.cluster.accumulation_steps


def _setting(inp: PlanInput, cluster: Cluster, options: PlanOptions, notes: Notes):
    params = options.params or ModelParams()
    if cluster.overlap is not None:
        params = dataclasses.replace(params, overlap=cluster.overlap)
    if cluster.latency_s is not None:
        params = dataclasses.replace(params, latency_s=cluster.latency_s)
    chosen = options.target
    if chosen is not None:  # chosen for the target: the measurement is the estimate's anchor
        batch, measured = options.batch_size or chosen.batch_size, inp.step_s
        tc = target_compute(inp, measured, batch, cluster, options, inp.batch_size)
    else:
        batch = options.batch_size or inp.batch_size
        measured = inp.step_s_at(batch) if batch != inp.batch_size else inp.step_s
        tc = target_compute(inp, measured, batch, cluster, options)
    for w in tc.warnings:
        notes.warn("estimate", w)
    k = cluster.accumulation_steps
    compute_s = k * tc.compute_s  # k micro-batches per exchange
    if options.recompute == "full":  # every block's forward once more (theory.memory)
        bf = inp.backward_fraction
        compute_s = recompute_compute_s(compute_s, None if bf is None else max(0.0, 1 - bf))
    load = inp.load_s_at(batch)
    cores = cluster.cpu_cores()[0]
    if load:
        needed = theory_io.loader_workers_needed(load, tc.compute_s)
        loaders = needed if options.loader_workers is None else options.loader_workers
        io_s = k * theory_io.node_exposed_io_s(load, loaders, tc.compute_s, 1, cores)
    else:
        needed, loaders, io_s = 0, options.loader_workers or 0, inp.io_s * k
    if cluster.ps_partition == "tensor" and not inp.tensor_bytes:
        raise UsageError("ps_partition 'tensor' needs the model's tensor sizes "
                         "(a profile, or a workload file naming the model)")
    backward = (None if inp.backward_fraction is None
                else inp.backward_fraction * tc.compute_s)
    work = StepWorkload(cluster.grad_bytes(inp.param_bytes), compute_s, io_s,
                        tuple(int(cluster.grad_bytes(b)) for b in inp.tensor_bytes),
                        backward_s=backward)
    derive = cluster.overlap is None and options.params is None
    return _Setting(inp, cluster, options, params, batch, measured, work, loaders, needed,
                    derive), tc


def _band(options: PlanOptions, tc) -> ErrorBand | None:
    """The prediction's band: the calibration's held-out range, widened by the compute
    estimate's band when T_C was estimated for another device."""
    compute = (relative_band(min(tc.band, 0.95), "compute estimate (leave-one-out)")
               if tc.estimate and tc.band else None)
    return combine(options.band, compute)


def io_at(st: _Setting):
    """Exposed input per exchange for g devices on a node (their loaders share its cores)."""
    load = st.inp.load_s_at(st.batch)
    if not load:
        return None
    cores = st.cluster.cpu_cores()[0]
    t_c = st.work.compute_s / st.cluster.accumulation_steps
    k = st.cluster.accumulation_steps
    return lambda g: k * theory_io.node_exposed_io_s(load, st.loaders, t_c, g, cores)


def _inputs_record(st: _Setting, archs: tuple[str, ...], max_gpus: int) -> dict[str, Any]:
    cluster = st.cluster
    intra_Bps, intra_name = cluster.intra_link()
    return {
        "input": st.inp.to_dict(),
        "cluster": cluster.to_dict(),
        "options": {"target_efficiency": st.options.target_efficiency, "max_gpus": max_gpus,
                    "architectures": list(archs), "batch_size": st.batch,
                    "loader_workers": st.options.loader_workers,
                    "default_mfu": st.options.default_mfu},
        "compute_s": st.work.compute_s,
        "io_s": st.work.io_s,
        "network_Bps": cluster.network_Bps() if cluster.has_network else None,
        "nics_per_node": topology.nics_per_node(cluster.gpus_per_node,
                                                min(cluster.nic_sharing()[0],
                                                    cluster.gpus_per_node)),
        "ps_network_Bps": cluster.ps_network_Bps() if cluster.has_network else None,
        "intra_node_Bps": intra_Bps,
        "intra_node": intra_name,
        "bandwidth_convention": "payload per direction (catalog payload_gbps, or the Gb/s given)",
    }


def plan(source: PlanInput | str | Path, cluster: Cluster,
         options: PlanOptions = PlanOptions()) -> Plan:  # noqa: B008 - frozen default
    """Predict the sweep over device counts and recommend a configuration, with reasons."""
    inp = layout_choice.judged_input(source if isinstance(source, PlanInput)
                                     else load_input(source))
    notes = Notes()
    check_layout_architecture(options, cluster)
    if options.target is None:
        options = dataclasses.replace(options, target=target_choice.choose(inp, cluster,
                                                                           options))
    st, tc = _setting(inp, cluster, options, notes)
    max_gpus = options.max_gpus or cluster.gpus
    if max_gpus > cluster.gpus:
        raise UsageError(f"--max-gpus {max_gpus} is more than the cluster's {cluster.gpus} "
                         f"devices ({cluster.nodes} nodes x {cluster.gpus_per_node}): raise "
                         "--nodes to plan a larger cluster")
    first = cluster.architecture or ARCHITECTURES[0]
    archs = options.architectures or (first, *[a for a in ARCHITECTURES if a != first])
    full = list(range(1, max_gpus + 1))
    all_rows = {a: sweep_architecture(st.work, cluster, st.params, a, full,
                                      st.samples_per_exchange,
                                      target_efficiency=options.target_efficiency,
                                      derive_overlap=st.derive_overlap, io_at=io_at(st))
                for a in archs}
    band = _band(options, tc)
    all_rows = {a: [r.with_band(band) for r in rows] for a, rows in all_rows.items()}
    shown = set(device_counts(max_gpus))
    sweep = tuple(r for a in archs for r in all_rows[a] if r.gpus in shown)
    choice = choosing.choose(all_rows, archs, options.target_efficiency, cluster.architecture)
    decided = layout_choice.choose(st, choice, all_rows, max_gpus)
    if layout_choice.needs_replan(st, decided) and not options.layout:
        return layout_choice.with_first_reason(
            plan(*layout_choice.replan_inputs(inp, cluster, options, decided)), decided)
    choice = layout_choice.apply(choice, all_rows, decided)

    advice.batch_reasons(st, notes)
    if decided is not None:
        (notes.why if decided.fits else notes.warn)("memory", decided.reason)
    for how in tc.reasons:
        notes.why("compute", how)
    advice.device_reasons(st, choice, all_rows, max_gpus, notes)
    advice.batch_to_scale(st, choice, all_rows, max_gpus, notes)
    ps = advice.server_reasons(st, choice, max_gpus, notes)
    uses_ps = ps is not None and ps.gpus == choice.row.gpus and choice.architecture == "ps"
    num_ps_min, num_ps = (ps.num_ps_min, ps.num_ps) if uses_ps else (0, 0)
    hosts = ps.servers_per_node if uses_ps else ()
    need_gbps, intra_gbps = advice.bandwidth_reasons(st, choice.architecture, max_gpus, notes)
    advice.link_reasons(st, notes)
    advice.loader_reasons(st, max_gpus, notes)
    cheapest = advice.cost_reasons(st, choice, notes)
    _warnings(st, choice.row.gpus, tc, notes)
    if decided is not None and decided.fits and (decided.layout != "ddp" or decided.warning):
        # it fits sharded, or as micro-batches: the decision's one warning says how
        notes.warnings[:] = [w for w in notes.warnings if w.topic != "memory"]
        if decided.warning:
            notes.warn("memory", decided.warning)
    row = choice.row
    alts = choosing.alternatives(choice, all_rows, max_gpus, cluster.gpus_per_node,
                               options.target_efficiency)
    small = _too_small(st)
    if small:
        notes.warn("compute", small)
    algorithm = advice.target_algorithm(st)
    accumulation = decided.accumulation_steps if decided else cluster.accumulation_steps
    recompute = options.recompute or (decided.recompute if decided else "none")
    rec = Recommendation(
        batch_size=st.batch, algorithm=algorithm,
        architecture=choice.architecture,
        gpus=row.gpus, num_ps=num_ps, num_ps_min=num_ps_min, network_gbps_needed=need_gbps,
        loader_workers=st.loaders_needed, reasons=tuple(notes.reasons),
        intra_node_gbps_needed=intra_gbps, samples_per_s=row.samples_per_s,
        efficiency=row.efficiency, cost_per_1k_samples=row.cost_per_1k_samples,
        cheapest=cheapest, alternatives=alts, too_small=small, servers_per_node=hosts,
        samples_per_s_low=row.samples_per_s_low, samples_per_s_high=row.samples_per_s_high,
        launch=launch_command(inp, cluster, choice.architecture, row.gpus, num_ps,
                              decided.launch_batch if decided else st.batch,
                              hosts, algorithm, flat_samples_per_s=(
                                  all_rows["allreduce"][row.gpus - 1].samples_per_s
                                  if "allreduce" in all_rows else None),
                              layout=decided.layout if decided else "ddp",
                              accumulation_steps=accumulation, recompute=recompute),
        micro_batch=decided.launch_batch if decided else st.batch, accumulation=accumulation,
        global_batch=row.gpus * (decided.launch_batch if decided else st.batch) * accumulation,
        recompute=recompute,
        layout=decided.layout if decided else "ddp",
        layout_reason=decided.reason if decided else None,
        layouts=tuple(o.to_dict() for o in decided.options) if decided else (),
        precision=tc.precision or (precision_of(algorithm) if algorithm else None),
        channels_last=bool(options.target.channels_last if options.target is not None
                           else algorithm and "channels_last" in algorithm),
        target=options.target.to_dict() if options.target is not None else None,
    )
    return Plan(_inputs_record(st, archs, max_gpus), sweep, rec, tuple(notes.warnings),
                tc.estimate, st.params, ps, band, tc.carried if tc.estimate else None)


def _warnings(st: _Setting, gpus: int, tc: TargetCompute, notes: Notes) -> None:
    memory_note = memory_check(st.inp, st.batch, st.cluster)
    if memory_note:
        notes.warn("memory", memory_note)
    global_batch = gpus * st.samples_per_exchange  # micro-batch x accumulation x devices
    if global_batch > LARGE_BATCH:
        notes.warn("batch",
                   f"global batch {global_batch:,} > {LARGE_BATCH:,}: convergence needs "
                   "learning-rate scaling and warm-up (Goyal et al., 2017); scalelab predicts "
                   "speed, not accuracy")
    if tc.estimate and st.inp.host_loaded and st.inp.host_s_per_op:
        from scalelab.plan.compute import host_s_per_op

        used = host_s_per_op(st.inp, hardware.device(st.cluster.device))[0]
        notes.warn("estimate", f"the profile's host time per operation, "
                   f"{st.inp.host_s_per_op * 1e6:.3g} us, came from a loaded machine "
                   f"({st.inp.host_loaded}): the plan uses {used * 1e6:.3g} us (quiet); "
                   "profile on a quiet machine to measure it")
    if tc.estimate and tc.carried == "precision":
        on = hardware.device(st.cluster.device).name
        notes.warn("estimate", f"estimate: compute time carried from the "
                   f"{source_precision(st.inp)} measurement to {tc.precision} on {on}; "
                   f"profile in {tc.precision} to measure it")
    elif tc.estimate:
        notes.warn("estimate", "estimate: compute time scaled to another device; profile on "
                   "the target device to measure it")
    if st.options.params is not None:
        which = st.options.calibration_model or "calibrated"
        notes.why("calibration", f"model parameters from the calibration file ({which} model"
                  + (", the fit was rejected by its held-out error" if which == "uncalibrated"
                     else "") + "): " + ", ".join(
            f"{k}={v:g}" for k, v in st.params.to_dict().items()))
    if st.cluster.intra_link_assumed() and st.cluster.gpus_per_node > 1:
        notes.warn("cluster", "no intra-node link given: assumed PCIe 3.0 x16")


SMALL_STEP_S = 2e-3  # below this a step is launch-bound: kernel launches, not the cluster


def _too_small(st: _Setting) -> str | None:
    """One line when a step is too short for the cluster's scaling to mean much."""
    t = st.work.compute_s
    if t >= SMALL_STEP_S:
        return None
    return (f"one step takes {format_s(t)} at batch {st.batch}: too small for the cluster to "
            "matter (kernel launches and synchronization, not compute or the network, set "
            "the pace); its throughputs are upper bounds: raise the batch or the model")
