"""The parts of a recommendation, each with its reasons: devices, servers, links, loaders.

Each function reads the plan's setting (the step's inputs at the chosen batch) and the
sweep, appends its :class:`~scalelab.plan.reasons.Reason` values, and returns the figures
it decided. Formulas come from :mod:`scalelab.theory`; numbers are written for a reader
by :mod:`scalelab.plan.text`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scalelab.plan.reasons import Notes
from scalelab.plan.sweep import Sweeper, SweepRow
from scalelab.plan.text import format_Bps, format_bytes, format_gbps, format_s
from scalelab.theory import comm, sharding, sizing
from scalelab.theory.units import Bps_to_gbps, ceil_div


@dataclass(frozen=True)
class Choice:
    """The recommended architecture and its row, with the best row of every architecture."""

    architecture: str
    row: SweepRow
    best: dict[str, SweepRow]


def choose(all_rows: dict[str, list[SweepRow]], archs: tuple[str, ...], target: float,
           preferred: str) -> Choice:
    """Per architecture the most devices that keep the target; the fastest of those wins."""
    best: dict[str, SweepRow] = {}
    for a in archs:
        ok = [r for r in all_rows[a] if r.efficiency >= target - 1e-12]
        best[a] = ok[-1] if ok else all_rows[a][0]
    chosen = max(archs, key=lambda a: (best[a].samples_per_s, a == preferred))
    return Choice(chosen, best[chosen], best)


def batch_reasons(st, notes: Notes) -> None:
    step = format_s(st.measured_step_s)
    if st.options.batch_size:
        notes.why("batch", f"batch_size {st.batch}: as asked; one device's step {step}")
    elif st.inp.source == "profile":
        notes.why("batch", f"batch_size {st.batch}: the profile's recommendation (smallest "
                  f"batch within 5% of the best measured throughput), step {step}")
    else:
        notes.why("batch", f"batch_size {st.batch}: the workload file's measurement, step {step}")
    if st.inp.algorithm:
        notes.why("algorithm", f"algorithm {st.inp.algorithm}: the fastest configuration that "
                  f"fits at batch {st.batch} in the profile")


def device_reasons(st, choice: Choice, all_rows: dict[str, list[SweepRow]], max_gpus: int,
                   notes: Notes) -> None:
    target = st.options.target_efficiency
    row, chosen = choice.row, choice.architecture
    g = row.gpus
    if row.efficiency >= target - 1e-12:
        notes.why("devices",
                  f"gpus {g} ({chosen}): most devices up to {max_gpus} with efficiency "
                  f"T_C/T = {format_s(row.compute_s)}/{format_s(row.step_s)} = "
                  f"{row.efficiency:.3f} >= target {target:g} (R_O = {row.overhead_ratio:.3f}); "
                  f"{row.samples_per_s:,.0f} samples/s, speedup {row.speedup:.2f}")
        if g < max_gpus:
            nxt = all_rows[chosen][g]
            notes.why("devices",
                      f"gpus {g + 1} would fall to efficiency {nxt.efficiency:.3f} < {target:g} "
                      f"(step {format_s(nxt.step_s)}: compute {format_s(nxt.compute_s)}, "
                      f"exchange {format_s(nxt.comm_s)}, input {format_s(nxt.io_s)})")
    else:
        notes.why("devices",
                  f"gpus 1: even one device misses the target efficiency {target:g} "
                  f"(T_C/T = {row.efficiency:.3f}, bottleneck {row.bottleneck})")
    archs = list(all_rows)
    if len(archs) > 1:
        others = ", ".join(f"{a} {choice.best[a].samples_per_s:,.0f} samples/s at "
                           f"{choice.best[a].gpus}" for a in archs if a != chosen)
        notes.why("architecture", f"architecture {chosen}: fastest at the target efficiency "
                  f"(vs {others})")
    at_max = {a: all_rows[a][-1] for a in archs}
    top = at_max.get(st.cluster.architecture, at_max[chosen])
    if top.bottleneck != "compute" and top.gpus > 1:
        notes.why("bottleneck",
                  f"at {top.gpus} devices {top.architecture} is {top.bottleneck}-bound: "
                  f"exchange {format_s(top.comm_s)} vs compute {format_s(top.compute_s)} per "
                  f"step (efficiency {top.efficiency:.3f})")


def server_reasons(st, choice: Choice, max_gpus: int, notes: Notes) -> tuple[int, int]:
    """(lemma minimum, servers) for the parameter-server setup at the recommended scale."""
    target = st.options.target_efficiency
    ps_sw = Sweeper(st.work, st.cluster, st.params, "ps", target_efficiency=target)
    g = choice.row.gpus
    ps_g = g if (choice.architecture == "ps" and g > 1) else max_gpus
    if ps_g <= 1:
        return 0, 0
    n_w = ps_sw.senders(ps_g)
    num_ps_min, num_ps = ps_sw.servers(ps_g)
    eff = st.params.bandwidth_efficiency
    b_ps, b_w = ps_sw.ps_Bps * eff, ps_sw.sender_Bps(ps_g) * eff
    s, compute_s = st.inp.param_bytes, st.work.compute_s
    notes.why("servers",
              f"num_ps_min {num_ps_min} (parameter servers at {ps_g} devices, N_w = {n_w}): "
              f"lemma N_ps >= ceil(2 S_p N_w/(B_ps T_C)) = ceil(2 x {format_bytes(s)} x {n_w}/"
              f"({format_Bps(b_ps)} x {format_s(compute_s)}))")
    if not sizing.worker_link_ok(s, b_w, compute_s):
        need_w = sizing.worker_bandwidth_needed_Bps(s, compute_s)
        notes.why("servers", f"worker link fails B_w >= 2 S_p/T_C = {format_Bps(need_w)} "
                  f"(has {format_Bps(b_w)}): no number of servers hides the exchange")
    cluster = st.cluster
    if cluster.ps_placement == "colocated":
        notes.why("servers", f"num_ps {num_ps}: one server on each of the {n_w} worker machines")
    elif cluster.ps != "auto":
        notes.why("servers", f"num_ps {num_ps}: as configured")
    else:
        bal = sharding.cached_balance(st.work.tensor_bytes, float(s), max(1, num_ps),
                                      cluster.ps_partition)
        fit_s = sizing.allowed_comm_s(compute_s, target, st.params.overlap, st.work.io_s)
        notes.why("servers",
                  f"num_ps {num_ps}: {cluster.ps_partition} placement puts "
                  f"{bal.largest_fraction:.1%} on the largest shard (effective servers "
                  f"1/max f = {bal.effective_servers:.2f}); enough for the server side to fit "
                  f"T_C (1/alpha - 1)/(1 - o) = {format_s(fit_s)}, "
                  "or to stop being slower than a worker's own link")
    if st.inp.tensor_bytes and cluster.ps_partition == "balanced" and num_ps > 1:
        wt = sharding.placement(st.inp.tensor_bytes, num_ps, sharding.WHOLE_TENSOR)
        if wt.largest_fraction > 1.05 / num_ps:
            notes.why("servers",
                      f"whole-tensor placement (TensorFlow's greedy strategy) would leave "
                      f"{wt.largest_fraction:.1%} on one of {num_ps} servers (effective "
                      f"{wt.effective_servers:.2f}): split tensors into even chunks")
    return num_ps_min, num_ps


def _nic_bytes(st, architecture: str, gpus: int) -> tuple[float, str]:
    """Bytes per step over each node's NIC at ``gpus`` devices, and what they are."""
    s, cluster = st.inp.param_bytes, st.cluster
    nodes = ceil_div(gpus, cluster.gpus_per_node)
    if gpus == 1 or (architecture != "ps" and nodes == 1):
        return 0.0, ""
    if architecture == "ps":
        senders = 1 if cluster.local_aggregation else min(cluster.gpus_per_node, gpus)
        return (comm.ps_worker_bytes(s) * senders,
                "each node's NIC carries 2 S_p per step (push-then-pull)")
    if architecture == "allreduce":
        return comm.ring_allreduce_bytes(s, gpus), "each ring member sends 2 (N-1)/N S_p"
    return comm.ring_allreduce_bytes(s, nodes), "each node sends 2 (n-1)/n S_p across nodes"


def bandwidth_reasons(st, architecture: str, max_gpus: int, notes: Notes
                      ) -> tuple[float, float]:
    """(NIC, in-node link) Gb/s per direction that keep the target at the full size."""
    target, p, io_s = st.options.target_efficiency, st.params, st.work.io_s
    compute_s, s = st.work.compute_s, st.inp.param_bytes
    link_bytes, link_what = _nic_bytes(st, architecture, max_gpus)
    allowed = sizing.allowed_comm_s(compute_s, target, p.overlap, io_s)
    need_gbps = 0.0
    if link_bytes > 0:
        need = sizing.bandwidth_needed_Bps(link_bytes, compute_s, target, p.overlap, io_s)
        need_gbps = Bps_to_gbps(need) / p.bandwidth_efficiency
        if math.isfinite(need_gbps):
            notes.why("network",
                      f"network_gbps_needed {format_gbps(need_gbps)} payload per direction for "
                      f"{max_gpus} devices at efficiency {target:g}: {link_what} = "
                      f"{format_bytes(link_bytes)} within T_C (1/alpha - 1)/(1 - o) = "
                      f"{format_s(allowed)} (cluster has {format_Bps(st.cluster.network_Bps())})")
        else:
            notes.why("network", f"network_gbps_needed: no bandwidth reaches efficiency "
                      f"{target:g} (the target leaves no time for the exchange)")
    g_node = min(st.cluster.gpus_per_node, max_gpus)
    intra_gbps = 0.0
    if g_node > 1:
        intra_bytes = comm.ring_allreduce_bytes(s, g_node)
        intra_need = sizing.bandwidth_needed_Bps(intra_bytes, compute_s, target, p.overlap, io_s)
        intra_gbps = Bps_to_gbps(intra_need) / p.bandwidth_efficiency
        intra_has, intra_name = st.cluster.intra_link()
        if math.isfinite(intra_gbps) and intra_need > intra_has * p.bandwidth_efficiency:
            notes.why("intra-node",
                      f"intra-node link too slow: a ring over {g_node} devices moves "
                      f"{format_bytes(intra_bytes)} per step, needing {intra_need / 1e9:.3g} "
                      f"GB/s within {format_s(allowed)}; {intra_name} has "
                      f"{intra_has / 1e9:.3g} GB/s")
    return need_gbps, intra_gbps


def loader_reasons(st, notes: Notes) -> None:
    load = st.inp.load_s_per_batch
    if load:
        notes.why("loaders", f"loader_workers {st.loaders_needed}: ceil(t_load/T_C) = "
                  f"ceil({format_s(load)}/{format_s(st.work.compute_s)}) hides input loading")
    else:
        notes.why("loaders", "loader_workers 0: no input-pipeline time measured (synthetic data)")


def cost_reasons(st, choice: Choice, notes: Notes) -> dict[str, Any] | None:
    if not st.cluster.price_per_gpu_hour:
        return None
    target = st.options.target_efficiency
    cands = [r for r in choice.best.values() if r.efficiency >= target - 1e-12]
    if not cands:
        return None
    c = min(cands, key=lambda r: (r.cost_per_1k_samples, -r.samples_per_s))
    notes.why("cost",
              f"cost: {choice.row.cost_per_1k_samples:.4g} per 1,000 samples at "
              f"{choice.row.gpus} devices (price x G / samples_per_s); cheapest meeting the "
              f"target at its largest scale: {c.architecture} on {c.gpus} "
              f"({c.cost_per_1k_samples:.4g})")
    return {"architecture": c.architecture, "gpus": c.gpus,
            "cost_per_1k_samples": c.cost_per_1k_samples, "samples_per_s": c.samples_per_s}
