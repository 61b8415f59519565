"""The parts of a recommendation, each with its reasons: devices, servers, links, loaders.

Each function reads the plan's setting (the step's inputs at the chosen batch) and the
sweep, appends its :class:`~scalelab.plan.reasons.Reason` values, and returns the figures
it decided. Formulas come from :mod:`scalelab.theory`; numbers are written for a reader
by :mod:`scalelab.text`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scalelab.plan.choice import Choice, architecture_reason
from scalelab.plan.choice import floor2 as floor2  # re-exported: the pages' rounding
from scalelab.plan.reasons import Notes
from scalelab.plan.step import BACKWARD_SHARE
from scalelab.plan.sweep import Sweeper, SweepRow
from scalelab.text import (
    format_Bps,
    format_bytes,
    format_gbps,
    format_s,
    plural,
    server_hosts,
)
from scalelab.theory import comm, sharding, sizing, topology
from scalelab.theory import io as theory_io
from scalelab.theory.units import Bps_to_gbps, ceil_div


def batch_reasons(st, notes: Notes) -> None:
    step = format_s(st.measured_step_s)
    chosen = st.options.target
    if chosen is not None:  # chosen for the target (scalelab.plan.target): its own reasons
        where, batch, algo, host = chosen.reasons
        notes.why("input", where)
        if st.batch == chosen.batch_size:
            notes.why("batch", batch)
        notes.why("algorithm", algo)
        notes.why("compute", host)
        return
    if st.options.batch_size:
        notes.why("batch", f"batch_size {st.batch}: as asked; one device's step {step}")
    elif st.inp.source == "profile":
        notes.why("batch", f"batch_size {st.batch}: the profile's recommendation (smallest "
                  f"batch within 5% of the best measured throughput), step {step}")
    else:
        notes.why("batch", f"batch_size {st.batch}: the workload file's measurement, step {step}")
    algo = target_algorithm(st)
    if algo and algo == st.inp.algorithm and st.inp.source == "profile":
        notes.why("algorithm", f"algorithm {algo}: the fastest configuration that fits at "
                  f"batch {st.batch} in the profile")
    elif algo and algo == st.inp.algorithm:
        notes.why("algorithm", f"algorithm {algo}: the computation configuration the workload "
                  f"file's step_s was measured in")
    elif algo:
        notes.why("algorithm", f"algorithm {algo}: the precision the {st.cluster.device} "
                  f"computes in" + (f" (the profile's {st.inp.algorithm} was chosen on "
                                    f"{st.inp.device or 'the profiled device'} and is not "
                                    "carried over)" if st.inp.algorithm else ""))


def target_algorithm(st) -> str | None:
    """The computation configuration the recommendation names: the profile's choice on the
    profiled device, else the precision the target computes in and why."""
    from scalelab import hardware
    from scalelab.plan.compute import target_precision

    c = st.cluster
    chosen = st.options.target
    if chosen is not None and chosen.precision_fixed is None:
        if chosen.algorithm == "default":
            return "fp32 (PyTorch's default)"
        return f"{chosen.algorithm} (chosen for {chosen.device})"
    if c.device is None:
        return st.inp.algorithm
    target = hardware.device(c.device)
    src = hardware.match_device(st.inp.device) if st.inp.device else None
    if src is not None and src.name == target.name:
        return st.inp.algorithm
    precision, why = target_precision(st.inp, c, st.options, target)
    return f"{precision} (PyTorch's default)" if why.startswith("PyTorch") else \
        f"{precision} ({why})"


def device_reasons(st, choice: Choice, all_rows: dict[str, list[SweepRow]], max_gpus: int,
                   notes: Notes) -> None:
    target = st.options.target_efficiency
    row, chosen = choice.row, choice.architecture
    g = row.gpus
    if row.efficiency >= target - 1e-12 and g > 1:
        notes.why("devices",
                  f"{plural(g, 'GPU')} ({chosen}): the most devices up to {max_gpus} that keep "
                  f"efficiency T_C/T = {format_s(row.compute_s)}/{format_s(row.step_s)} = "
                  f"{row.efficiency:.3f} >= target {target:g} (R_O = {row.overhead_ratio:.3f}); "
                  f"{row.samples_per_s:,.0f} samples/s, speedup {row.speedup:.2f}")
        if g < max_gpus:
            nxt = all_rows[chosen][g]
            notes.why("devices",
                      f"{g + 1} GPUs would fall to efficiency {nxt.efficiency:.3f} < {target:g} "
                      f"(step {format_s(nxt.step_s)}: compute {format_s(nxt.compute_s)}, "
                      f"exchange {format_s(nxt.comm_s)}, input {format_s(nxt.io_s)})")
    elif choice.below_target:
        two = all_rows[chosen][1]
        notes.why("devices",
                  f"{plural(g, 'GPU')} ({chosen}, as the cluster names it): no count of 2 or "
                  f"more keeps target {target:g} (2 GPUs: efficiency {two.efficiency:.3f}, "
                  f"{two.bottleneck} limits scaling); on all of them efficiency "
                  f"{row.efficiency:.3f}, {row.samples_per_s:,.0f} samples/s, speedup "
                  f"{row.speedup:.2f} (T_C/T = {format_s(row.compute_s)}/"
                  f"{format_s(row.step_s)}); what would reach the target: the network and "
                  "batch lines below")
    elif max_gpus > 1:
        two = all_rows[chosen][1]
        notes.why("devices",
                  f"1 GPU: already 2 GPUs fall to efficiency {two.efficiency:.3f} < target "
                  f"{target:g} ({two.bottleneck} limits scaling); more GPUs still add "
                  "throughput at lower efficiency: see the alternatives")
    architecture_reason(choice, list(all_rows), notes)
    top = all_rows.get(st.cluster.architecture, all_rows[chosen])[-1]
    if top.bottleneck != "compute" and top.gpus > 1:
        notes.why("bottleneck",
                  f"at {top.gpus} devices {top.architecture} is {top.bottleneck}-bound: "
                  f"exchange {format_s(top.comm_s)} vs compute {format_s(top.compute_s)} per "
                  f"step (efficiency {top.efficiency:.3f})")


@dataclass(frozen=True)
class PsSizing:
    """Parameter servers for the ps architecture at one scale (plan.json's ``ps_sizing``)."""

    gpus: int
    senders: int
    """N_w: machines with local aggregation, else devices."""
    num_ps_min: int
    """The lemma's minimum (dedicated servers), or the node count (colocated)."""
    num_ps: int
    """Servers the plan uses."""
    placement: str
    """dedicated | colocated."""
    link: str
    """The link the lemma was computed for."""
    servers_per_node: tuple[int, ...] = ()
    """Colocated: servers on each node used, node 0 first (empty when dedicated)."""

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "senders": self.senders, "num_ps_min": self.num_ps_min,
                "num_ps": self.num_ps, "placement": self.placement, "link": self.link,
                "servers_per_node": list(self.servers_per_node),
                "server_nodes": [j for j, c in enumerate(self.servers_per_node) if c]}


def batch_to_scale(st, choice: Choice, all_rows: dict[str, list[SweepRow]], max_gpus: int,
                   notes: Notes) -> int | None:
    """The per-device batch at which all ``max_gpus`` would keep the target, when they don't.

    Compute grows with the batch and the exchange does not: with the overhead
    ``O = T - T_C`` at ``max_gpus`` held fixed and ``T_C`` proportional to b, efficiency
    ``T_C' / (T_C' + O) >= alpha`` needs ``T_C' >= O alpha / (1 - alpha)``, i.e.
    ``b' = ceil(b O alpha / ((1 - alpha) T_C))``.
    """
    target = st.options.target_efficiency
    if (choice.row.gpus >= max_gpus and not choice.below_target) or max_gpus <= 1 \
            or target >= 1:
        return None
    top = all_rows[choice.architecture][max_gpus - 1]
    overhead = top.step_s - top.compute_s
    if overhead <= 0:
        return None
    b = st.batch
    need = math.ceil(b * overhead * target / ((1 - target) * top.compute_s) - 1e-9)
    if need <= b:
        return None
    fits = st.inp.max_batch_size
    tail = (f"; the profiled device fits at most {fits}: gradient accumulation "
            f"(accumulation_steps = {math.ceil(need / fits)}) gives the same exchange per "
            "sample" if fits and need > fits else "")
    notes.why("batch", f"to keep efficiency {target:g} on all {max_gpus} devices raise the "
              f"per-device batch to about {need:,} (compute grows with the batch, the "
              f"exchange of {format_s(overhead)} per step does not){tail}")
    return need


def server_reasons(st, choice: Choice, max_gpus: int, notes: Notes) -> PsSizing | None:
    """Servers of the ps setup: at the recommended scale when it uses them, else at the
    cluster's size as a what-if (the paper's question: how many servers would it take?)."""
    g = choice.row.gpus
    uses_ps = choice.architecture == "ps" and g > 1
    if not uses_ps:
        g = max_gpus
        if g <= 1 or "ps" not in choice.best:
            return None
    target = st.options.target_efficiency
    ps_sw = Sweeper(st.work, st.cluster, st.params, "ps", target_efficiency=target)
    n_w = ps_sw.senders(g)
    num_ps_min, num_ps = ps_sw.servers(g)
    what_if = "" if uses_ps else f"if parameter servers on all {g} devices: "
    if st.cluster.ps_placement == "colocated":
        per_node = _colocated_reasons(st, ps_sw, g, num_ps, what_if, notes)
        return PsSizing(g, n_w, num_ps_min, num_ps, "colocated", "host link and node NIC",
                        per_node)
    eff = st.params.bandwidth_efficiency
    b_ps, b_w = ps_sw.ps_Bps * eff, ps_sw.sender_Bps(g) * eff
    s, compute_s = st.work.param_bytes, st.work.compute_s
    notes.why("servers",
              f"{what_if}num_ps_min {num_ps_min} (dedicated servers at {g} devices, N_w = "
              f"{n_w} senders): lemma N_ps >= ceil(2 S_p N_w/(B_ps T_C)) = ceil(2 x "
              f"{format_bytes(s)} x {n_w}/({format_Bps(b_ps)} servers' NIC x "
              f"{format_s(compute_s)}))")
    if not sizing.worker_link_ok(s, b_w, compute_s):
        need_w = sizing.worker_bandwidth_needed_Bps(s, compute_s)
        notes.why("servers", f"{what_if}worker link fails B_w >= 2 S_p/T_C = "
                  f"{format_Bps(need_w)} (each sender's NIC share has {format_Bps(b_w)}): "
                  "no number of servers hides the exchange")
    if st.cluster.ps != "auto":
        notes.why("servers", f"{what_if}num_ps {num_ps}: as configured")
    else:
        bal = sharding.cached_balance(st.work.tensor_bytes, float(s), max(1, num_ps),
                                      st.cluster.ps_partition)
        fit_s = sizing.allowed_comm_s(compute_s, target, st.params.overlap, st.work.io_s)
        notes.why("servers",
                  f"{what_if}num_ps {num_ps}: {st.cluster.ps_partition} placement puts "
                  f"{bal.largest_fraction:.1%} on the largest shard (effective servers "
                  f"1/max f = {bal.effective_servers:.2f}); enough for the server side to fit "
                  f"T_C (1/alpha - 1)/(1 - o) = {format_s(fit_s)}, "
                  "or to stop being slower than a worker's own link")
    _whole_tensor_note(st, num_ps, notes)
    return PsSizing(g, n_w, num_ps_min, num_ps, "dedicated", "the servers' NIC")


def _colocated_reasons(st, ps_sw: Sweeper, g: int, num_ps: int, what_if: str,
                       notes: Notes) -> tuple[int, ...]:
    """Where colocated servers run and what each link carries; returns servers per node."""
    nodes = ceil_div(g, st.cluster.gpus_per_node)
    per_node = topology.servers_per_node(num_ps, nodes)
    where = ("on the host CPU" if nodes == 1 else
             f"on the CPUs of {plural(sum(1 for c in per_node if c), 'node')} of {nodes}: "
             f"{server_hosts(per_node)}")
    host_Bps = ps_sw.host_Bps * st.params.bandwidth_efficiency
    host_name = st.cluster.host_link_Bps()[1]
    carries = ""
    if nodes > 1:
        bal = sharding.cached_balance(st.work.tensor_bytes, float(st.work.param_bytes),
                                      num_ps, st.cluster.ps_partition)
        f_max, f_min = topology.colocated_node_fractions(num_ps, nodes, bal.largest_fraction,
                                                         bal.smallest_fraction)
        carries = (f"; a node's NIC carries its own GPUs' pushes to the other nodes' servers "
                   f"(1 - F of S_p, F its servers' share) and, on a node hosting a server, "
                   f"the other nodes' pushes to it (F S_p from each) on the same NIC: shares "
                   f"from {f_min:.1%} to {f_max:.1%}, the busiest NIC sets the exchange")
    notes.why("servers",
              f"{what_if}num_ps {num_ps}: servers {where}; a GPU reaches its own node's "
              f"server over its host link ({host_name}, {format_Bps(host_Bps)}), other nodes' "
              f"servers over the node's NIC{carries}")
    need = sizing.worker_bandwidth_needed_Bps(st.work.param_bytes, st.work.compute_s)
    shared = min(st.cluster.host_link_sharing()[0], g)
    if need * shared > host_Bps:
        notes.why("servers", f"{what_if}host link too slow to hide the exchange: 2 S_p/T_C = "
                  f"{format_Bps(need)} per GPU x {shared} sharing it, has {format_Bps(host_Bps)}")
    _whole_tensor_note(st, num_ps, notes)
    return per_node


def _whole_tensor_note(st, num_ps: int, notes: Notes) -> None:
    if st.inp.tensor_bytes and st.cluster.ps_partition == "balanced" and num_ps > 1:
        wt = sharding.placement(st.inp.tensor_bytes, num_ps, sharding.WHOLE_TENSOR)
        if wt.largest_fraction > 1.05 / num_ps:
            notes.why("servers",
                      f"whole-tensor placement (TensorFlow's greedy strategy) would leave "
                      f"{wt.largest_fraction:.1%} on one of {num_ps} servers (effective "
                      f"{wt.effective_servers:.2f}): split tensors into even chunks")


def _nic_bytes(st, architecture: str, gpus: int) -> tuple[float, str]:
    """Bytes per step over each node's NIC at ``gpus`` devices, and what they are."""
    s, cluster = st.inp.param_bytes, st.cluster
    nodes = ceil_div(gpus, cluster.gpus_per_node)
    colocated = cluster.ps_placement == "colocated"
    if gpus == 1 or (nodes == 1 and (architecture != "ps" or colocated)):
        return 0.0, ""  # one node: no byte crosses a NIC (its servers on its own CPU)
    if architecture == "ps":
        senders = 1 if cluster.local_aggregation else min(cluster.gpus_per_node, gpus)
        return (comm.ps_worker_bytes(s) * senders,
                "each node's NIC carries 2 S_p per step (push-then-pull)")
    if architecture == "allreduce":
        return comm.ring_allreduce_bytes(s, gpus), "each ring member sends 2 (N-1)/N S_p"
    return comm.ring_allreduce_bytes(s, nodes), "each node sends 2 (n-1)/n S_p across nodes"


def _allowed_comm_s(st, architecture: str) -> float:
    """Longest exchange that keeps the target: T_C (1/alpha - 1)/(1 - o), or with DDP's
    buckets the exchange whose exposed part fits that slack."""
    target, p, w = st.options.target_efficiency, st.params, st.work
    if st.derive_overlap and architecture != "ps":
        slack = sizing.allowed_comm_s(w.compute_s, target, 0.0, w.io_s)
        backward = w.backward_s if w.backward_s is not None else \
            BACKWARD_SHARE * w.compute_s
        bucket = st.cluster.ddp_bucket_mb * 2**20
        return comm.ddp_allowed_comm_s(slack, backward, w.param_bytes, bucket)
    return sizing.allowed_comm_s(w.compute_s, target, p.overlap, w.io_s)


def _hidden_how(st, architecture: str) -> str:
    if st.derive_overlap and architecture != "ps":
        return (f" (T_C (1/alpha - 1) exposed, the rest hidden behind backward in "
                f"{st.cluster.ddp_bucket_mb:g} MiB buckets)")
    return " (T_C (1/alpha - 1)/(1 - o))"


def bandwidth_reasons(st, architecture: str, max_gpus: int, notes: Notes
                      ) -> tuple[float, float]:
    """(NIC, in-node link) Gb/s per direction that keep the target at the full size."""
    target, p, s = st.options.target_efficiency, st.params, st.work.param_bytes
    link_bytes, link_what = _nic_bytes(st, architecture, max_gpus)
    allowed = _allowed_comm_s(st, architecture)
    need_gbps = 0.0
    if link_bytes > 0:
        need = link_bytes / allowed if allowed > 0 else math.inf
        need_gbps = Bps_to_gbps(need) / p.bandwidth_efficiency
        if math.isfinite(need_gbps):
            notes.why("network",
                      f"network_gbps_needed {format_gbps(need_gbps)} payload per direction for "
                      f"{max_gpus} devices at efficiency {target:g}: {link_what} = "
                      f"{format_bytes(link_bytes)} within {format_s(allowed)} of exchange "
                      f"per step{_hidden_how(st, architecture)} (cluster has "
                      f"{_node_nic_text(st)})")
        else:
            notes.why("network", f"network_gbps_needed: no bandwidth reaches efficiency "
                      f"{target:g} (the target leaves no time for the exchange)")
    g_node = min(st.cluster.gpus_per_node, max_gpus)
    intra_gbps = 0.0
    if g_node > 1:
        intra_bytes = comm.ring_allreduce_bytes(s, g_node)
        intra_need = intra_bytes / allowed if allowed > 0 else math.inf
        intra_gbps = Bps_to_gbps(intra_need) / p.bandwidth_efficiency
        intra_has, intra_name = st.cluster.intra_link()
        if math.isfinite(intra_gbps) and intra_need > intra_has * p.bandwidth_efficiency:
            notes.why("intra-node",
                      f"intra-node link too slow: a ring over {g_node} devices moves "
                      f"{format_bytes(intra_bytes)} per step, needing {intra_need / 1e9:.3g} "
                      f"GB/s within {format_s(allowed)}; {intra_name} has "
                      f"{intra_has / 1e9:.3g} GB/s")
    return need_gbps, intra_gbps


def _node_nic_text(st) -> str:
    """A node's network as a count of NICs and their rate: ``8 NICs x 379 Gb/s = 3,030
    Gb/s per node`` (``9.49 Gb/s per node, one NIC`` with one)."""
    c = st.cluster
    nics = topology.nics_per_node(c.gpus_per_node, min(c.nic_sharing()[0], c.gpus_per_node))
    one = c.network_Bps()
    if nics == 1:
        return f"{format_Bps(one)} per node, one NIC"
    return f"{nics} NICs x {format_Bps(one)} = {format_Bps(nics * one)} per node"


def link_reasons(st, notes: Notes) -> None:
    """Every assumption the plan makes about the links, one line each (topic "cluster"):
    the NICs of a node and where their count comes from, the link inside a node, each
    device's link to the host."""
    c = st.cluster
    if c.gpus == 1:
        return
    if c.has_network and c.nodes > 1 or c.ps_placement == "dedicated" and c.has_network:
        _, how = c.nic_sharing()
        notes.why("cluster", f"links: network {c.network_label()}, {_node_nic_text(st)} for "
                  f"{plural(c.gpus_per_node, 'GPU')}: {how}")
    if c.gpus_per_node > 1:
        notes.why("cluster", f"links: inside a node {c.intra_link()[1]}")
    host, how = c.host_link_Bps()
    if host is not None and c.ps_placement == "colocated":
        notes.why("cluster", f"links: each GPU to its host {how}, "
                  f"{c.host_link_sharing()[1]}")


def loader_reasons(st, max_gpus: int, notes: Notes) -> None:
    """Loader processes per device, and whether a node's cores can feed all its devices."""
    load = st.inp.load_s_at(st.batch)
    if not load:
        notes.why("loaders", "loader_workers 0: no input-pipeline time measured (synthetic data)")
        return
    t_c = st.work.compute_s / st.cluster.accumulation_steps
    notes.why("loaders", f"loader_workers {st.loaders_needed}: ceil(t_load/T_C) = "
              f"ceil({format_s(load)}/{format_s(t_c)}) hides input loading")
    g = min(st.cluster.gpus_per_node, max_gpus)
    cores, cores_how = st.cluster.cpu_cores()
    node = theory_io.node_input(load / st.batch, st.batch, t_c, g, cores, st.loaders)
    if cores is None:
        notes.why("input", f"a node's {plural(g, 'GPU')} need {node.cores_needed} cores for "
                  f"their loaders ({g} x {node.loaders_per_gpu}); the node's cores are "
                  f"{cores_how}")
    elif node.input_bound:
        notes.why("input",
                  f"input-bound: a node's {plural(g, 'GPU')} need {node.cores_needed} cores "
                  f"for their loaders ({g} x {node.loaders_per_gpu}), the node has {cores_how}: "
                  f"{format_s(node.exposed_io_s)} of input shows per step, capping the node "
                  f"at {node.samples_per_s:,.0f} samples/s (compute alone: "
                  f"{node.samples_per_s_compute:,.0f}); fix: {node.cores_needed} cores")
    else:
        notes.why("input", f"a node's {plural(g, 'GPU')} need {node.cores_needed} cores for "
                  f"their loaders; it has {cores_how}: enough")


def cost_reasons(st, choice: Choice, notes: Notes) -> dict[str, Any] | None:
    if not st.cluster.price_per_gpu_hour:
        return None
    target = st.options.target_efficiency
    cands = [r for r in choice.best.values() if r.efficiency >= target - 1e-12]
    if not cands:
        return None
    c = min(cands, key=lambda r: (r.cost_per_1k_samples, -r.samples_per_s))
    # one device exchanges nothing: no architecture to name
    what = "1 GPU alone" if c.gpus == 1 else f"{c.architecture} on {c.gpus}"
    notes.why("cost",
              f"cost: {choice.row.cost_per_1k_samples:.4g} per 1,000 samples at "
              f"{choice.row.gpus} devices (price x G / samples_per_s); cheapest meeting the "
              f"target at its largest scale: {what} ({c.cost_per_1k_samples:.4g})")
    return {"architecture": None if c.gpus == 1 else c.architecture, "gpus": c.gpus,
            "cost_per_1k_samples": c.cost_per_1k_samples, "samples_per_s": c.samples_per_s}
