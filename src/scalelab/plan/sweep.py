"""The sweep: one architecture's predicted step at every device count of a cluster.

Each row is one call of :func:`scalelab.plan.step.predict_step`; throughput, speedup and
efficiency come from :mod:`scalelab.theory.amdahl`'s weak-scaling forms (fixed per-device
batch): throughput G b / T(G), speedup against one device, efficiency speedup / G.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scalelab import hardware
from scalelab.plan.cluster import Cluster
from scalelab.plan.step import (
    ARCHITECTURES,
    ModelParams,
    StepPrediction,
    StepSetup,
    StepWorkload,
    predict_step,
)
from scalelab.theory import amdahl, sharding, sizing
from scalelab.theory.band import ErrorBand
from scalelab.theory.units import ceil_div

ASSUMED_HOST_LINK = "pcie3"  # a colocated server's host link when neither cluster nor device says


@dataclass(slots=True)
class SweepRow:
    """One (architecture, device count) point of the plan (plan.json's ``sweep``)."""

    gpus: int
    """G: devices."""
    nodes: int
    """Machines the devices occupy."""
    architecture: str
    """ps | allreduce | hierarchical."""
    num_ps: int
    """Parameter servers (0 when the architecture has none)."""
    compute_s: float
    """T_C per step, seconds."""
    comm_s: float
    """Exchange per step, seconds."""
    io_s: float
    """Exposed input per step, seconds."""
    step_s: float
    """T(G), seconds."""
    samples_per_s: float
    """G b / T(G)."""
    speedup: float
    """Throughput against one device."""
    efficiency: float
    """speedup / G."""
    overhead_ratio: float
    """R_O = (T - T_C) / T_C."""
    bottleneck: str
    """The largest part of the step (compute, io, or the exchange's slowest link)."""
    network: str
    """The network the row is for."""
    form: str
    """The exchange's form (push-then-pull, pipelined, ring all-reduce, ...)."""
    cost_per_1k_samples: float | None = None
    """price x G / samples_per_s x 1000, when the cluster has a price."""
    step_s_low: float | None = None
    """Lower end of the step's band, seconds (None: no band)."""
    step_s_high: float | None = None
    """Upper end of the step's band, seconds."""
    samples_per_s_low: float | None = None
    """Throughput at the band's slow end."""
    samples_per_s_high: float | None = None
    """Throughput at the band's fast end."""

    def with_band(self, band: ErrorBand | None) -> SweepRow:
        """This row with its step and throughput ranges from ``band``."""
        if band is None:
            return self
        lo, hi = band.time_s(self.step_s)
        slo, shi = band.rate(self.samples_per_s)
        return dataclasses.replace(self, step_s_low=lo, step_s_high=hi, samples_per_s_low=slo,
                                   samples_per_s_high=shi)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def device_counts(max_gpus: int) -> list[int]:
    """Rows written to the plan: every count up to 256, then 1-64 and powers of two (x1.5)."""
    if max_gpus <= 256:
        return list(range(1, max_gpus + 1))
    counts = set(range(1, 65))
    p = 64
    while p <= max_gpus:
        counts.add(p)
        counts.add(p * 3 // 2)
        p *= 2
    counts.add(max_gpus)
    return sorted(c for c in counts if c <= max_gpus)


class Sweeper:
    """Evaluates one architecture at any device count with the cluster's links."""

    def __init__(self, work: StepWorkload, cluster: Cluster, params: ModelParams,
                 architecture: str, network_Bps: float | None = None,
                 target_efficiency: float = 0.8, derive_overlap: bool = False,
                 io_at: Callable[[int], float] | None = None):
        self.work = work
        self.io_at = io_at
        self.target = target_efficiency
        self.cluster = cluster
        self.params = params
        self.arch = architecture
        self.nic = cluster.network_Bps() if network_Bps is None else network_Bps
        self.ps_Bps = (self.nic if network_Bps is not None and cluster.ps_network is None
                       and cluster.ps_network_gbps is None else cluster.ps_network_Bps())
        self.intra = cluster.intra_link()[0]
        self.colocated = cluster.ps_placement == "colocated"
        self.gpus_per_nic = cluster.nic_sharing()[0]
        self.host_share = cluster.host_link_sharing()[0]
        self.host_Bps = cluster.host_link_Bps()[0]
        if self.host_Bps is None and self.colocated:
            self.host_Bps = hardware.link(ASSUMED_HOST_LINK).bandwidth_Bps
        self.bucket_bytes = cluster.ddp_bucket_mb * 2**20 if derive_overlap else None
        self._ps_cache: dict[int, tuple[int, int]] = {}
        self._base: StepSetup | None = None
        self._predictions: dict[tuple[int, ...], StepPrediction] = {}

    def senders(self, gpus: int) -> int:
        """N_w: machines with local aggregation, else devices."""
        nodes = ceil_div(gpus, self.cluster.gpus_per_node)
        return nodes if self.cluster.local_aggregation else gpus

    def sender_Bps(self, gpus: int) -> float:
        """One sender's share of its machine's NICs."""
        g = min(self.cluster.gpus_per_node, gpus)
        nics = ceil_div(g, min(self.gpus_per_nic, g))
        return self.nic * nics if self.cluster.local_aggregation else self.nic * nics / g

    def servers(self, gpus: int) -> tuple[int, int]:
        """(lemma minimum, servers used) at ``gpus`` devices."""
        n_w = self.senders(gpus)
        if n_w not in self._ps_cache:
            self._ps_cache[n_w] = self._servers(gpus, n_w)
        return self._ps_cache[n_w]

    def _servers(self, gpus: int, n_w: int) -> tuple[int, int]:
        eff = self.params.bandwidth_efficiency
        s = self.work.param_bytes
        t_c = self.work.compute_s * self.params.compute_scale
        b_ps = self.ps_Bps * eff
        nodes = ceil_div(gpus, self.cluster.gpus_per_node)
        if self.colocated:
            ps = self.cluster.ps
            return nodes, (nodes if ps == "auto" else int(ps))
        minimum = sizing.ps_servers_needed(s, n_w, b_ps, t_c)
        if self.cluster.ps != "auto":
            return minimum, int(self.cluster.ps)
        # Enough servers for the exchange to fit the time the target efficiency leaves,
        # but no more than it takes for the servers to stop being slower than a worker's
        # own link.
        worker_phase = sizing.worker_phase_s(s, self.sender_Bps(gpus) * eff)
        allowed = sizing.allowed_comm_s(t_c, self.target, self.params.overlap, self.work.io_s)
        budget = max(allowed, worker_phase, 1e-12)
        tb = self.work.tensor_bytes or (int(s),)
        policy = self.cluster.ps_partition if self.work.tensor_bytes else "balanced"
        used = sharding.servers_really_needed(tb, n_w, b_ps, budget, policy,
                                              max_servers=max(4096, minimum))
        if used is None:
            used = len(tb) if policy == sharding.WHOLE_TENSOR else minimum
        return minimum, used

    def base_setup(self) -> StepSetup:
        """The cluster's links and placement as a validated setup (one device, one server),
        made on first use."""
        if self._base is None:
            c = self.cluster
            self._base = StepSetup(
                architecture=self.arch, partition=c.ps_partition, colocated=self.colocated,
                full_duplex=c.full_duplex, gpus_per_node=c.gpus_per_node,
                local_aggregation=c.local_aggregation, worker_bandwidth_Bps=self.nic,
                ps_bandwidth_Bps=None if self.colocated else self.ps_Bps,
                intra_bandwidth_Bps=self.intra, latency_s=c.latency_s,
                gpus_per_nic=self.gpus_per_nic, host_bandwidth_Bps=self.host_Bps,
                gpus_per_host_link=self.host_share, bucket_bytes=self.bucket_bytes)
        return self._base

    def num_ps(self, gpus: int) -> int:
        """Servers in the setup at ``gpus`` devices (1 where there are none to size)."""
        return self.servers(gpus)[1] if self.arch == "ps" and gpus > 1 else 1

    def setup(self, gpus: int) -> StepSetup:
        """The setup at ``gpus`` devices (the servers sized for them)."""
        return self.base_setup().at_workers(gpus, self.num_ps(gpus))

    def workload(self, gpus: int) -> StepWorkload:
        """The step's workload at ``gpus``: exposed input depends on the devices per node."""
        if self.io_at is None:
            return self.work
        g = min(self.cluster.gpus_per_node, gpus)
        return dataclasses.replace(self.work, io_s=self.io_at(g))

    def predict(self, gpus: int) -> StepPrediction:
        """The step at ``gpus`` devices, shared by the counts whose setups have the same
        :func:`~scalelab.plan.step.step_key` (the workload's exposed input depends on the
        devices per machine, which the key holds wherever it does not hold the count)."""
        num_ps = self.num_ps(gpus)
        key = self.base_setup().key_at(gpus, num_ps)
        pred = self._predictions.get(key)
        if pred is None:  # the setup is made only here: most counts share a step
            work = self.work if self.io_at is None else self.workload(gpus)
            setup = self.base_setup().at_workers(gpus, num_ps)
            pred = self._predictions[key] = predict_step(work, setup, self.params)
        return pred


class RowMaker:
    """:func:`make_row` for every row of one sweep, with what they share worked out once."""

    __slots__ = ("arch", "batch", "network", "per_node", "price", "one_device_sps",
                 "has_servers")

    def __init__(self, arch: str, batch: int, base_step: float, cluster: Cluster,
                 network: str):
        self.arch, self.batch, self.network = arch, batch, network
        self.per_node = cluster.gpus_per_node
        self.price = cluster.price_per_gpu_hour
        self.one_device_sps = amdahl.weak_throughput(1, batch, base_step)
        self.has_servers = arch == "ps"

    def row(self, gpus: int, pred: StepPrediction) -> SweepRow:
        """The row at ``gpus`` devices from their prediction."""
        step, compute = pred.step_s, pred.compute_s
        sps = amdahl.weak_throughput(gpus, self.batch, step)
        speedup = sps / self.one_device_sps
        cost = self.price * gpus / 3600.0 / sps * 1000.0 if self.price else None
        # SweepRow's fields in order (positional: a sweep makes tens of thousands)
        return SweepRow(
            gpus, ceil_div(gpus, self.per_node), self.arch,
            pred.num_ps if self.has_servers and gpus > 1 else 0,
            compute, pred.comm_s, pred.io_s, step, sps, speedup, speedup / gpus,
            (step - compute) / compute, pred.bottleneck, self.network, pred.form, cost)


def make_row(gpus: int, arch: str, pred: StepPrediction, batch: int, base_step: float,
             cluster: Cluster, network: str) -> SweepRow:
    """A sweep row from a prediction, against one device's step ``base_step``."""
    return RowMaker(arch, batch, base_step, cluster, network).row(gpus, pred)


def sweep_architecture(work: StepWorkload, cluster: Cluster, params: ModelParams,
                       architecture: str, counts: Sequence[int], batch_size: int,
                       network_Bps: float | None = None, network: str | None = None,
                       target_efficiency: float = 0.8,
                       derive_overlap: bool = False,
                       io_at: Callable[[int], float] | None = None) -> list[SweepRow]:
    """Rows for ``counts`` devices in one architecture (the sweep the plan writes).

    ``batch_size`` is the samples one device contributes per exchange (b x accumulation).
    """
    sw = Sweeper(work, cluster, params, architecture, network_Bps, target_efficiency,
                 derive_overlap, io_at)
    base = predict_step(sw.workload(1), StepSetup(architecture), params).step_s
    rows = RowMaker(architecture, batch_size, base, cluster, network or cluster.network_label())
    return [rows.row(g, sw.predict(g)) for g in counts]


def network_sweep(work: StepWorkload, cluster: Cluster, networks: Sequence[str],
                  counts: Sequence[int], batch_size: int,
                  architectures: Sequence[str] = ARCHITECTURES,
                  params: ModelParams = ModelParams(),  # noqa: B008 - frozen default
                  target_efficiency: float = 0.8,
                  derive_overlap: bool = False) -> list[SweepRow]:
    """Rows for every (network, architecture, count): the plot's and the benchmark's grid."""
    rows: list[SweepRow] = []
    for name in networks:
        bps = hardware.network(name).payload_Bps
        for a in architectures:
            rows.extend(sweep_architecture(work, cluster, params, a, counts, batch_size,
                                           network_Bps=bps, network=name,
                                           target_efficiency=target_efficiency,
                                           derive_overlap=derive_overlap))
    return rows
