"""The model of one data-parallel step: compute, exchange, input, and what bounds it.

:func:`predict_step` is the one model of a step; the sweep, the recommendation, the
validation against real runs and the calibration all call it. Its formulas come from
:mod:`scalelab.theory` (exchange times from :mod:`~scalelab.theory.comm`, shard balance
from :mod:`~scalelab.theory.sharding`); this module only decides which link each part of
the exchange crosses and which formula applies.

Python use::

    from scalelab.plan.step import StepSetup, StepWorkload, predict_step
    predict_step(StepWorkload(param_bytes=100e6, compute_s=0.2),
                 StepSetup("ps", workers=4, num_ps=2, worker_bandwidth_Bps=1.25e9))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from scalelab.errors import UsageError, is_number, number_wanted
from scalelab.theory import comm, sharding, topology

ARCHITECTURES = ("ps", "allreduce", "hierarchical")
BOTTLENECKS = ("compute", "io", "network-worker", "network-server", "shard-imbalance",
               "intra-node", "host-link")
BACKWARD_SHARE = 2.0 / 3.0  # backward's share of a step's FLOPs (2 of 3 matmuls per layer)


@dataclass(frozen=True)
class ModelParams:
    """Free parameters of the step model; the defaults are neutral (the textbook model)."""

    bandwidth_efficiency: float = 1.0
    """Fraction of each link's per-direction bandwidth actually achieved (0, 1]."""
    latency_s: float = 0.0
    """Per-message latency in seconds: once per PS phase, once per ring step."""
    overlap: float = 0.0
    """Fraction of the exchange hidden behind backward, [0, 1]."""
    compute_scale: float = 1.0
    """Factor on the compute time (a calibrated correction of T_C)."""
    apply_s_per_byte: float = 0.0
    """Server time per gradient byte the busiest server receives, seconds/byte."""

    def __post_init__(self):
        if not 0 < self.bandwidth_efficiency <= 1.0 + 1e-9:
            raise UsageError(f"bandwidth_efficiency must be in (0, 1], got "
                             f"{self.bandwidth_efficiency}")
        if not self.latency_s >= 0:
            raise UsageError(f"latency_s must be >= 0, got {self.latency_s}")
        if not 0 <= self.overlap <= 1:
            raise UsageError(f"overlap must be in [0, 1], got {self.overlap}")
        if not self.compute_scale > 0:
            raise UsageError(f"compute_scale must be > 0, got {self.compute_scale}")
        if not self.apply_s_per_byte >= 0:
            raise UsageError(f"apply_s_per_byte must be >= 0, got {self.apply_s_per_byte}")

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "calibration params") -> ModelParams:
        """The parameters a calibration file holds (every key one of the fields, every
        value a number); a field left out keeps its neutral default."""
        keys = set(cls.__dataclass_fields__)
        unknown = sorted(str(k) for k in set(d) - keys)
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(keys))})")
        bad = {k: v for k, v in d.items() if not is_number(v)}
        if bad:
            k, v = next(iter(bad.items()))
            raise UsageError(f"{where}: {k!r} must be {number_wanted(v)}, got {v!r}")
        try:
            return cls(**{k: float(v) for k, v in d.items()})
        except UsageError as e:
            raise UsageError(f"{where}: {e}") from None

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StepWorkload:
    """What one step moves and computes."""

    param_bytes: float
    """S_p: bytes of gradients exchanged per step."""
    compute_s: float
    """T_C: one device's forward + backward + update, seconds."""
    io_s: float = 0.0
    """Input time per step not hidden by loader processes, seconds."""
    tensor_bytes: tuple[int, ...] = ()
    """Bytes of each parameter tensor (for whole-tensor placement on servers)."""
    backward_s: float | None = None
    """Backward time of one micro-batch, seconds (None: 2/3 of compute, the FLOPs ratio)."""

    def __post_init__(self):
        if self.backward_s is not None and not self.backward_s >= 0:
            raise UsageError(f"backward_s must be >= 0, got {self.backward_s}")
        if not self.param_bytes > 0:
            raise UsageError(f"param_bytes must be > 0, got {self.param_bytes}")
        if not self.compute_s > 0:
            raise UsageError(f"compute time must be > 0, got {self.compute_s}")
        if not self.io_s >= 0:
            raise UsageError(f"io_s must be >= 0, got {self.io_s}")
        object.__setattr__(self, "tensor_bytes", tuple(int(b) for b in self.tensor_bytes))


@dataclass(frozen=True)
class StepSetup:
    """How the devices exchange and over which links (everything but the workload)."""

    architecture: str = "ps"
    """ps | allreduce | hierarchical."""
    workers: int = 1
    """G: data-parallel devices."""
    num_ps: int = 1
    """Parameter servers (dedicated); colocated: 0 means one per sender."""
    partition: str = sharding.EVEN_CHUNKS
    """Shards: 'balanced' even chunks or 'tensor' whole tensors placed greedily."""
    colocated: bool = False
    """A server on every worker machine, sharing its NIC."""
    full_duplex: bool = False
    """Push and pull pipelined (the runner's form) instead of push-then-pull."""
    gpus_per_node: int = 1
    """Devices per machine; they share its NIC."""
    local_aggregation: bool = True
    """PS: reduce inside the node first, so the machines are the senders."""
    worker_bandwidth_Bps: float | None = None
    """Each machine's NIC, bytes/s per direction."""
    ps_bandwidth_Bps: float | None = None
    """A dedicated server's NIC, bytes/s per direction (default: the worker's)."""
    intra_bandwidth_Bps: float | None = None
    """Device-to-device link inside a machine, bytes/s per direction."""
    latency_s: float | None = None
    """Per-message latency, overrides ModelParams.latency_s when given."""
    gpus_per_nic: int | None = None
    """Devices sharing one NIC (None: one NIC per machine)."""
    host_bandwidth_Bps: float | None = None
    """Each device's host link (PCIe) per direction; None: not modelled."""
    gpus_per_host_link: int = 1
    """Devices sharing one host link (a PCIe switch uplink)."""
    bucket_bytes: float | None = None
    """All-reduce: derive the overlap from DDP buckets of this size (None: params.overlap)."""
    nodes: int = field(init=False, repr=False, compare=False)
    """Machines the workers occupy (derived)."""
    devices_per_node: int = field(init=False, repr=False, compare=False)
    """Devices on each machine (derived)."""
    nics: int = field(init=False, repr=False, compare=False)
    """NICs per machine, used together (derived)."""

    def __post_init__(self):
        if self.architecture not in ARCHITECTURES:
            raise UsageError(f"unknown architecture {self.architecture!r} "
                             f"({', '.join(ARCHITECTURES)})")
        _check_workers(self.workers)
        if self.gpus_per_node < 1:
            raise UsageError(f"gpus_per_node must be >= 1, got {self.gpus_per_node}")
        if self.gpus_per_nic is not None and self.gpus_per_nic < 1:
            raise UsageError(f"gpus_per_nic must be >= 1, got {self.gpus_per_nic}")
        if self.gpus_per_host_link < 1:
            raise UsageError(f"gpus_per_host_link must be >= 1, got {self.gpus_per_host_link}")
        if self.host_bandwidth_Bps is not None and not self.host_bandwidth_Bps > 0:
            raise UsageError(f"host link bandwidth must be > 0, got {self.host_bandwidth_Bps}")
        if self.bucket_bytes is not None and not self.bucket_bytes > 0:
            raise UsageError(f"bucket_bytes must be > 0, got {self.bucket_bytes}")
        _derive(self.__dict__)

    def at_workers(self, workers: int, num_ps: int) -> StepSetup:
        """This setup at ``workers`` devices and ``num_ps`` servers: the sweep's per-point
        setup. Only the worker count is checked (the other fields were, when this setup was
        made); the derived fields are computed again."""
        _check_workers(workers)
        fields = self.__dict__.copy()
        fields["workers"] = workers
        fields["num_ps"] = num_ps
        _derive(fields)
        new = object.__new__(StepSetup)
        object.__setattr__(new, "__dict__", fields)
        return new

    def key_at(self, workers: int, num_ps: int) -> tuple[int, ...]:
        """``step_key(self.at_workers(workers, num_ps))`` without making that setup: a
        sweep makes one only for the counts whose step it has not predicted yet."""
        _check_workers(workers)
        return _key(self.architecture, self.local_aggregation, self.gpus_per_node, workers,
                    num_ps)


def _derive(fields: dict[str, Any]) -> None:
    """A setup's derived fields, in its ``__dict__``: computed once, since a sweep reads
    them many times per point (a frozen instance without ``__slots__`` keeps its fields
    there, which is what ``object.__setattr__`` would write)."""
    workers, per_node = fields["workers"], fields["gpus_per_node"]
    g = workers if workers < per_node else per_node  # min(), without the call
    per_nic = fields["gpus_per_nic"] or per_node
    fields["nodes"] = -(-workers // per_node)
    fields["devices_per_node"] = g
    fields["nics"] = topology.nics_per_node(g, per_nic if per_nic < g else g)


def _check_workers(workers: int) -> None:
    if workers < 1 or int(workers) != workers:
        raise UsageError(f"workers must be an integer >= 1, got {workers}")


@dataclass(slots=True)
class StepPrediction:
    """The predicted parts of one step, seconds (see DESIGN.md's symbols)."""

    compute_s: float
    push_s: float
    apply_s: float
    pull_s: float
    comm_s: float
    io_s: float
    step_s: float
    form: str
    intra_s: float = 0.0
    bottleneck: str = "compute"
    num_ps: int = 0
    effective_servers: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Exchange(NamedTuple):
    comm_s: float
    link: str
    form: str
    push_s: float = 0.0
    apply_s: float = 0.0
    pull_s: float = 0.0
    intra_s: float = 0.0
    num_ps: int = 0
    effective_servers: float = 0.0


def _servers(st: StepSetup, senders: int) -> int:
    """Servers in use: colocated defaults to one per machine."""
    if st.colocated:
        return max(1, int(st.num_ps)) if st.num_ps else st.nodes
    if int(st.num_ps) < 1:
        raise UsageError(f"number of parameter servers must be >= 1, got {st.num_ps}")
    return int(st.num_ps)


def _ps(work: StepWorkload, st: StepSetup, params: ModelParams, nic: float,
        intra_Bps: float | None, lat: float) -> _Exchange:
    s, g = float(work.param_bytes), st.devices_per_node
    intra = 0.0
    if st.local_aggregation:
        senders, per_node = st.nodes, 1
        if g > 1:
            intra = comm.ring_allreduce_s(s, g, intra_Bps)
    else:
        senders, per_node = st.workers, g
    used = _servers(st, senders)
    try:
        bal = sharding.cached_balance(work.tensor_bytes, s, used, st.partition)
    except ValueError as e:
        raise UsageError(str(e)) from None
    f_max, f_min = bal.largest_fraction, bal.smallest_fraction
    eff = params.bandwidth_efficiency
    if st.colocated:  # a node's share: the sum of its servers' (any count on any nodes)
        f_max, f_min = topology.colocated_node_fractions(used, st.nodes, f_max, f_min)
    server_Bps = None
    if not st.colocated:
        server_Bps = nic if st.ps_bandwidth_Bps is None else st.ps_bandwidth_Bps * eff
        if not server_Bps > 0:
            raise UsageError(f"server bandwidth must be > 0, got {st.ps_bandwidth_Bps}")
    host = None if st.host_bandwidth_Bps is None else st.host_bandwidth_Bps * eff
    phase, top = topology.ps_phase(s, st.nodes, per_node, nic * st.nics, host,
                                   st.gpus_per_host_link, st.colocated, server_Bps, f_max,
                                   f_min, st.full_duplex, lat)
    form = comm.PIPELINED if st.full_duplex else comm.PUSH_THEN_PULL
    apply = params.apply_s_per_byte * senders * s * bal.largest_fraction
    exchange = phase + apply + (0.0 if st.full_duplex else phase)
    link = "compute" if top is None else top
    if link == topology.NIC_IN and bal.largest_fraction > 1.05 / used:
        link = "shard-imbalance"
    if intra > exchange:
        link = "intra-node"
    return _Exchange(exchange + intra, link, form, phase, apply, phase, intra, used,
                     bal.effective_servers)


def _allreduce(work: StepWorkload, st: StepSetup, nic: float, intra_Bps: float | None,
               lat: float) -> _Exchange:
    one_node, node_nic = st.nodes == 1, nic * st.nics
    hop = intra_Bps if one_node else (node_nic if intra_Bps is None else min(node_nic, intra_Bps))
    t = comm.ring_allreduce_s(work.param_bytes, st.workers, hop, 0.0 if one_node else lat)
    slow_intra = intra_Bps is not None and intra_Bps < node_nic
    return _Exchange(t, "intra-node" if one_node or slow_intra else "network-worker",
                     "ring all-reduce")


# memoized: a sweep asks for the same machines at every device count of a node
_hierarchical_allreduce = lru_cache(maxsize=1024)(comm.hierarchical_allreduce)


def _hierarchical(work: StepWorkload, st: StepSetup, nic: float, intra_Bps: float | None,
                  lat: float) -> _Exchange:
    h = _hierarchical_allreduce(work.param_bytes, st.devices_per_node, st.nodes,
                                intra_Bps or 1.0, (nic * st.nics) or 1.0, lat)
    link = "intra-node" if h.intra_s > h.inter_s else "network-worker"
    return _Exchange(h.comm_s, link, "hierarchical all-reduce", intra_s=h.intra_s)


def step_key(st: StepSetup) -> tuple[int, ...]:
    """What of the worker count a step at ``st`` depends on: :func:`predict_step` of two
    setups that differ only in ``workers`` and ``num_ps`` is the same when their keys are
    (with the same workload and parameters). An all-reduce ring spans every device, and so
    do parameter-server senders without local aggregation; otherwise a step sees only the
    machines, the devices on each and the servers (:func:`exchange_of`'s forms)."""
    return _key(st.architecture, st.local_aggregation, st.gpus_per_node, st.workers,
                st.num_ps)


def _key(architecture: str, local_aggregation: bool, per_node: int, workers: int,
         num_ps: int) -> tuple[int, ...]:
    if workers == 1 or architecture == "allreduce" or \
            (architecture == "ps" and not local_aggregation):
        return (workers, num_ps)
    # the machines and the devices on each, as _derive counts them (written out again:
    # a call here cost the sweep 3-4% in two paired runs; a test checks the two agree)
    return (-(-workers // per_node), workers if workers < per_node else per_node, num_ps)


def exchange_of(work: StepWorkload, st: StepSetup, params: ModelParams) -> _Exchange:
    """The exchange of one step at ``st`` (zero for one device)."""
    if st.workers == 1:
        return _Exchange(0.0, "compute", "single device")
    nic_given = st.worker_bandwidth_Bps
    if nic_given is None or not nic_given > 0:
        if st.nodes > 1 or st.architecture == "ps":
            raise UsageError(f"network bandwidth must be > 0, got {nic_given}")
    eff = params.bandwidth_efficiency
    intra_Bps = None
    if st.devices_per_node > 1:
        if st.intra_bandwidth_Bps is None or not st.intra_bandwidth_Bps > 0:
            raise UsageError(f"intra-node bandwidth must be > 0, got {st.intra_bandwidth_Bps}")
        intra_Bps = st.intra_bandwidth_Bps * eff
    nic = (nic_given or 0.0) * eff
    lat = params.latency_s if st.latency_s is None else st.latency_s
    if st.architecture == "ps":
        return _ps(work, st, params, nic, intra_Bps, lat)
    if st.architecture == "allreduce":
        return _allreduce(work, st, nic, intra_Bps, lat)
    return _hierarchical(work, st, nic, intra_Bps, lat)


COMPUTE_BOUND_OVERHEAD = 0.05  # R_O below which a step counts as compute-bound


def limiting_part(compute_s: float, step_s: float, io_s: float, link: str) -> str:
    """What limits scaling: the part of the step beyond compute that grows with G.

    ``compute`` while the overhead ``T - T_C`` is under 5% of ``T_C`` (efficiency >= 0.95:
    more devices add throughput almost linearly); otherwise the larger of the exposed input
    (``io``) and the exposed exchange, named by its slowest link.
    """
    overhead = step_s - compute_s
    if overhead <= COMPUTE_BOUND_OVERHEAD * compute_s:
        return "compute"
    exposed_comm = overhead - io_s
    return "io" if io_s >= exposed_comm else link


def _overlap(work: StepWorkload, st: StepSetup, params: ModelParams, ex: _Exchange) -> float:
    """params.overlap, or for all-reduce with ``bucket_bytes`` the DDP bucket overlap."""
    if st.bucket_bytes is None or st.architecture == "ps" or ex.comm_s <= 0:
        return params.overlap
    backward = work.backward_s
    if backward is None:
        backward = BACKWARD_SHARE * work.compute_s * params.compute_scale
    exposed = comm.ddp_exposed_s(ex.comm_s, backward, work.param_bytes, st.bucket_bytes)
    return min(1.0, max(0.0, 1.0 - exposed / ex.comm_s))


def predict_step(workload: StepWorkload, setup: StepSetup = StepSetup(),  # noqa: B008
                 params: ModelParams = ModelParams()) -> StepPrediction:  # noqa: B008
    """Predicted step of ``setup.workers`` data-parallel devices.

    - ``ps``: with ``local_aggregation`` each machine reduces its devices' gradients first
      (ring inside the node) and the machines are the N_w senders; otherwise every device
      is a sender with its share of the NIC. Exchange by
      :func:`scalelab.theory.comm.ps_exchange` (push-then-pull unless ``full_duplex``),
      shards from ``partition``, plus the servers' apply time.
    - ``allreduce``: one ring over all devices; its slowest hop is the NIC when it spans
      machines, the device link otherwise.
    - ``hierarchical``: ring inside each machine, then ring over machines on the NIC.

    Step: :func:`scalelab.theory.comm.overlapped_step_s` with ``params.overlap`` (or the
    DDP bucket overlap). The bottleneck is what limits scaling (:func:`limiting_part`).
    """
    compute = workload.compute_s * params.compute_scale
    io = workload.io_s
    ex = exchange_of(workload, setup, params)
    overlap = _overlap(workload, setup, params, ex)
    step = comm.overlapped_step_s(compute, ex.comm_s, io, overlap)
    bottleneck = limiting_part(compute, step, io, ex.link)
    return StepPrediction(compute, ex.push_s, ex.apply_s, ex.pull_s, ex.comm_s, io, step,
                          ex.form, ex.intra_s, bottleneck, ex.num_ps, ex.effective_servers)
