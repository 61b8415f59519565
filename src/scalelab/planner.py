"""Profile + cluster -> plan: the predicted sweep over device counts and recommendations.

The one model of a step is :func:`predict_step`; the sweep, the recommendation and the
validation against real runs all call it. Its formulas come from :mod:`scalelab.theory`.

Python use::

    from scalelab.planner import Cluster, PlanOptions, load_workload, plan
    p = plan(load_workload("examples/workload.toml"),
             Cluster(nodes=4, gpus_per_node=8, device="A100-SXM-80GB", network="100GbE"))
    p.recommendation.gpus, p.to_dict()["sweep"][0]

Bandwidth: a network named from the catalog counts at its per-direction payload rate
(``payload_gbps``: after line coding and TCP/RDMA framing); ``network_gbps=X`` is taken as
X Gb/s of payload (1 Gb/s = 125e6 B/s). The paper's server counts (183 on 1GbE, 19 on
10GbE, 4 on 56 Gb/s InfiniBand for AlexNet) use the nominal rate, i.e. ``network_gbps``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from scalelab import hardware
from scalelab.errors import UsageError
from scalelab.results import read_json, read_toml
from scalelab.theory import comm, sharding, sizing
from scalelab.theory import io as theory_io

ARCHITECTURES = ("ps", "allreduce", "hierarchical")
PLACEMENTS = ("dedicated", "colocated")
BOTTLENECKS = ("compute", "io", "network-worker", "network-server", "shard-imbalance",
               "intra-node")
DEFAULT_MFU = 0.4
LARGE_BATCH = 8192


def _gbps_to_Bps(gbps: float) -> float:
    return gbps * 1e9 / 8.0


# ---------------------------------------------------------------------------------------
# The model of one step


@dataclass(frozen=True)
class ModelParams:
    """Free parameters of the step model; the defaults are neutral (the textbook model).

    ``bandwidth_efficiency``: fraction of each link's bandwidth actually achieved.
    ``latency_s``: per-message latency (once per PS phase, once per ring step).
    ``overlap``: fraction of the exchange hidden behind backward.
    ``compute_scale``: factor on compute time (contention between processes on one host).
    ``apply_s_per_byte``: server time per gradient byte the busiest server receives.
    """

    bandwidth_efficiency: float = 1.0
    latency_s: float = 0.0
    overlap: float = 0.0
    compute_scale: float = 1.0
    apply_s_per_byte: float = 0.0

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
    def from_dict(cls, d: dict[str, Any]) -> ModelParams:
        keys = set(cls.__dataclass_fields__)
        try:
            return cls(**{k: float(v) for k, v in d.items() if k in keys})
        except (TypeError, ValueError) as e:
            if isinstance(e, UsageError):
                raise
            raise UsageError(f"calibration params are not numbers: {e}") from None

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def load_calibration(path: str | Path) -> ModelParams:
    """``params`` of a ``scalelab.calibration/1`` file as :class:`ModelParams`."""
    data = read_json(path, "calibration")
    params = data.get("params")
    if not isinstance(params, dict):
        raise UsageError(f"{path}: calibration file has no 'params' object")
    return ModelParams.from_dict(params)


@dataclass(frozen=True)
class StepWorkload:
    """What one step moves and computes: bytes exchanged, compute and exposed input time."""

    param_bytes: float
    compute_s: float
    io_s: float = 0.0
    tensor_bytes: tuple[int, ...] = ()

    def __post_init__(self):
        if not self.param_bytes > 0:
            raise UsageError(f"param_bytes must be > 0, got {self.param_bytes}")
        if not self.compute_s > 0:
            raise UsageError(f"compute time must be > 0, got {self.compute_s}")
        if not self.io_s >= 0:
            raise UsageError(f"io_s must be >= 0, got {self.io_s}")
        object.__setattr__(self, "tensor_bytes", tuple(int(b) for b in self.tensor_bytes))


@dataclass(slots=True)
class StepPrediction:
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


@lru_cache(maxsize=4096)
def _balance(tensor_bytes: tuple[int, ...], param_bytes: float, num_ps: int,
             partition: str) -> sharding.ShardBalance:
    if partition == sharding.WHOLE_TENSOR:
        if not tensor_bytes:
            raise UsageError("partition 'tensor' needs the model's tensor sizes "
                             "(a profile, or a workload file naming the model)")
        return sharding.placement(tensor_bytes, num_ps, partition)
    return sharding.even_chunk_balance(int(param_bytes), num_ps)


def predict_step(
    workload: StepWorkload,
    architecture: str = "ps",
    workers: int = 1,
    num_ps: int = 1,
    partition: str = "balanced",
    colocated: bool = False,
    worker_bandwidth_Bps: float | None = None,
    ps_bandwidth_Bps: float | None = None,
    latency_s: float | None = None,
    params: ModelParams = ModelParams(),  # noqa: B008 - frozen, immutable default
    full_duplex: bool = False,
    gpus_per_node: int = 1,
    intra_bandwidth_Bps: float | None = None,
    local_aggregation: bool = True,
) -> StepPrediction:
    """Predicted step of ``workers`` data-parallel devices (the model; see module docs).

    ``worker_bandwidth_Bps`` is each machine's per-direction NIC bandwidth;
    ``ps_bandwidth_Bps`` a dedicated server's (defaults to the worker's). Devices sit
    ``gpus_per_node`` to a machine and share its NIC; inside a machine they talk over
    ``intra_bandwidth_Bps``. ``latency_s`` (per message) overrides ``params.latency_s``.

    - ``ps``: with ``local_aggregation`` each machine reduces its devices' gradients first
      (ring inside the node) and the machines are the N_w senders; otherwise every device is
      a sender with its share of the NIC. Exchange by :func:`scalelab.theory.comm.ps_exchange`
      (push-then-pull unless ``full_duplex``), shards from ``partition`` ('balanced' even
      chunks, 'tensor' whole tensors placed greedily), plus the servers' apply time.
    - ``allreduce``: one ring over all devices; its slowest hop is the NIC when it spans
      machines, the device link otherwise.
    - ``hierarchical``: ring inside each machine, then ring over machines on the NIC.

    Step: :func:`scalelab.theory.comm.overlapped_step_s` with ``params.overlap``.
    One device alone exchanges nothing.
    """
    if architecture not in ARCHITECTURES:
        raise UsageError(f"unknown architecture {architecture!r} ({', '.join(ARCHITECTURES)})")
    if workers < 1 or int(workers) != workers:
        raise UsageError(f"workers must be an integer >= 1, got {workers}")
    if gpus_per_node < 1:
        raise UsageError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    eff = params.bandwidth_efficiency
    lat = params.latency_s if latency_s is None else latency_s
    compute = workload.compute_s * params.compute_scale
    io = workload.io_s
    s = float(workload.param_bytes)
    g = min(gpus_per_node, workers)
    nodes = -(-workers // gpus_per_node)
    push = pull = apply = intra = 0.0
    form = ""
    bottleneck = "compute"
    eff_servers = 0.0
    used_ps = 0
    if workers > 1:
        if worker_bandwidth_Bps is None or not worker_bandwidth_Bps > 0:
            if nodes > 1 or architecture == "ps":
                raise UsageError(f"network bandwidth must be > 0, got {worker_bandwidth_Bps}")
        intra_Bps = None
        if g > 1:
            if intra_bandwidth_Bps is None or not intra_bandwidth_Bps > 0:
                raise UsageError(f"intra-node bandwidth must be > 0, got {intra_bandwidth_Bps}")
            intra_Bps = intra_bandwidth_Bps * eff
        nic = (worker_bandwidth_Bps or 0.0) * eff
        if architecture == "ps":
            if local_aggregation:
                senders, sender_Bps = nodes, nic
                if g > 1:
                    intra = comm.ring_allreduce_s(s, g, intra_Bps)
            else:
                senders, sender_Bps = workers, nic / g
            if colocated:
                used_ps = senders if local_aggregation or g == 1 else nodes
                used_ps = max(1, min(int(num_ps), senders)) if num_ps else used_ps
            else:
                used_ps = int(num_ps)
                if used_ps < 1:
                    raise UsageError(f"number of parameter servers must be >= 1, got {num_ps}")
            bal = _balance(workload.tensor_bytes, s, used_ps, partition)
            eff_servers = bal.effective_servers
            server_Bps = nic if ps_bandwidth_Bps is None else ps_bandwidth_Bps * eff
            if not server_Bps > 0:
                raise UsageError(f"server bandwidth must be > 0, got {ps_bandwidth_Bps}")
            if senders > 1 or not colocated:
                f_min = bal.smallest_fraction if used_ps >= senders else 0.0
                ex = comm.ps_exchange(s, senders, bal.largest_fraction, sender_Bps, server_Bps,
                                      colocated=colocated, full_duplex=full_duplex,
                                      smallest_fraction=f_min, latency_s=lat)
                push, pull, form = ex.push_s, ex.pull_s, ex.form
                apply = params.apply_s_per_byte * senders * s * bal.largest_fraction
                exchange = (push + apply) if full_duplex else (push + apply + pull)
                if ex.worker_s >= ex.server_s:
                    net = "network-worker"
                elif bal.largest_fraction > 1.05 / used_ps:
                    net = "shard-imbalance"
                else:
                    net = "network-server"
            else:
                exchange, net = 0.0, "network-worker"
                form = comm.PIPELINED if full_duplex else comm.PUSH_THEN_PULL
            total = exchange + intra
            net = "intra-node" if intra > exchange else net
        elif architecture == "allreduce":
            form = "ring all-reduce"
            hop = intra_Bps if nodes == 1 else (nic if intra_Bps is None else min(nic, intra_Bps))
            total = comm.ring_allreduce_s(s, workers, hop, lat if nodes > 1 else 0.0)
            net = "intra-node" if nodes == 1 or (intra_Bps is not None and intra_Bps < nic) \
                else "network-worker"
        else:
            form = "hierarchical all-reduce"
            h = comm.hierarchical_allreduce(s, g, nodes, intra_Bps or 1.0, nic or 1.0, lat)
            intra, total = h.intra_s, h.comm_s
            net = "intra-node" if h.intra_s > h.inter_s else "network-worker"
        comm_s = total
        if architecture != "ps":
            push = pull = 0.0
        if comm_s > compute and comm_s >= io:
            bottleneck = net
        elif io > compute:
            bottleneck = "io"
    else:
        comm_s = 0.0
        form = "single device"
        if io > compute:
            bottleneck = "io"
    step = comm.overlapped_step_s(compute, comm_s, io, params.overlap)
    return StepPrediction(compute, push, apply, pull, comm_s, io, step, form, intra,
                          bottleneck, used_ps, eff_servers)


# ---------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class PlanInput:
    """One device's measurement, from a profile or a hand-written workload file."""

    batch_size: int
    step_s: float
    param_bytes: int
    source: str  # "profile" or "workload"
    model: str | None = None
    tensor_bytes: tuple[int, ...] = ()
    flops_per_sample: float | None = None
    device: str | None = None  # where step_s was measured (as reported)
    algorithm: str | None = None
    load_s_per_batch: float | None = None
    io_s: float = 0.0  # exposed input time as given (workload files)
    batches: tuple[tuple[int, float], ...] = ()
    fit_step_s: tuple[float, float] | None = None  # intercept, per_sample
    fit_memory_bytes: tuple[float, float] | None = None  # intercept, per_sample
    max_batch_size: int | None = None
    path: str | None = None
    input_shape: tuple[int, ...] = (3, 224, 224)
    num_classes: int = 1000

    def __post_init__(self):
        where = f"{self.path}: " if self.path else ""
        if int(self.batch_size) != self.batch_size or self.batch_size < 1:
            raise UsageError(f"{where}batch_size must be an integer >= 1, got {self.batch_size}")
        if not (isinstance(self.step_s, (int, float)) and self.step_s > 0):
            raise UsageError(f"{where}step_s must be > 0 seconds, got {self.step_s}")
        if not (isinstance(self.param_bytes, (int, float)) and self.param_bytes > 0):
            raise UsageError(f"{where}param_bytes must be > 0, got {self.param_bytes}")
        if not self.io_s >= 0:
            raise UsageError(f"{where}io_s must be >= 0, got {self.io_s}")

    def step_s_at(self, batch_size: int) -> float:
        """Measured step time at ``batch_size``, or the linear fit's between measurements."""
        for b, t in self.batches:
            if b == batch_size:
                return t
        if batch_size == self.batch_size:
            return self.step_s
        if self.max_batch_size and batch_size > self.max_batch_size:
            raise UsageError(f"batch size {batch_size} does not fit in the profiled device's "
                             f"memory (largest that fits: {self.max_batch_size})")
        if self.fit_step_s is None:
            measured = ", ".join(str(b) for b, _ in self.batches) or str(self.batch_size)
            raise UsageError(f"batch size {batch_size} was not measured (measured: {measured})")
        a, per = self.fit_step_s
        t = a + per * batch_size
        if not t > 0:
            raise UsageError(f"the step-time fit gives {t:.3g} s at batch {batch_size}")
        return t

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["tensor_count"] = len(self.tensor_bytes)
        d.pop("tensor_bytes")
        d["batches"] = [{"batch_size": b, "step_s": t} for b, t in self.batches]
        return d


def _num(d: dict, key: str, where: str, required: bool = True):
    v = d.get(key)
    if v is None:
        if required:
            raise UsageError(f"{where}: missing {key!r}")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UsageError(f"{where}: {key!r} must be a number, got {v!r}")
    return v


def load_profile(path: str | Path) -> PlanInput:
    """A ``scalelab.profile/1`` file as planner input (DESIGN.md's profile contract)."""
    data = read_json(path, "profile")
    where = str(path)
    try:
        wl = data["workload"]
        env = data.get("environment") or {}
        batches_raw = data["batches"]
        if not isinstance(wl, dict) or not isinstance(batches_raw, list) or not batches_raw:
            raise TypeError
        batches = tuple(sorted((int(_num(r, "batch_size", where)), float(_num(r, "step_s", where)))
                               for r in batches_raw))
    except (KeyError, TypeError, AttributeError):
        raise UsageError(f"{where}: not a complete profile (needs workload and batches)") from None
    rec = data.get("recommended_batch_size") or batches[-1][0]
    algo = data.get("algorithms") or {}
    chosen = algo.get("chosen") if isinstance(algo, dict) else None
    step_at = dict(batches)
    step_s = step_at.get(rec)
    if chosen and isinstance(algo.get("candidates"), list):
        for c in algo["candidates"]:
            if isinstance(c, dict) and c.get("name") == chosen and c.get("step_s"):
                step_s = float(c["step_s"])
    if step_s is None:
        raise UsageError(f"{where}: recommended batch {rec} has no measured step")
    fit = data.get("fit") or {}
    fit_step = fit.get("step_s") if isinstance(fit, dict) else None
    fit_pair = None
    if isinstance(fit_step, dict) and fit_step.get("per_sample") is not None:
        fit_pair = (float(fit_step.get("intercept") or 0.0), float(fit_step["per_sample"]))
    fit_mem = fit.get("memory_bytes") if isinstance(fit, dict) else None
    mem_pair = None
    if isinstance(fit_mem, dict) and fit_mem.get("per_sample") is not None:
        mem_pair = (float(fit_mem.get("intercept") or 0.0), float(fit_mem["per_sample"]))
    io = data.get("io") or {}
    load = io.get("load_s_per_batch") if isinstance(io, dict) else None
    device = env.get("device_name") or env.get("device")
    if str(env.get("device", "")).lower() == "cpu":
        device = "cpu"
    return PlanInput(
        batch_size=int(rec), step_s=float(step_s),
        param_bytes=int(_num(wl, "param_bytes", where)), source="profile",
        model=wl.get("model"), input_shape=tuple(wl.get("input_shape") or (3, 224, 224)),
        num_classes=int(wl.get("num_classes") or 1000),
        tensor_bytes=tuple(int(b) for b in wl.get("tensor_bytes") or ()),
        flops_per_sample=_num(wl, "flops_per_sample", where, required=False) or None,
        device=device, algorithm=chosen, load_s_per_batch=float(load) if load else None,
        batches=batches, fit_step_s=fit_pair, fit_memory_bytes=mem_pair,
        max_batch_size=data.get("max_batch_size"), path=where,
    )


def load_workload(path: str | Path) -> PlanInput:
    """A hand-written ``workload.toml`` (DESIGN.md): step_s at batch_size, model or bytes."""
    return workload_from_dict(read_toml(path), str(path))


def workload_from_dict(data: dict[str, Any], where: str = "workload") -> PlanInput:
    known = {"model", "param_bytes", "batch_size", "step_s", "device", "io_s",
             "flops_per_sample", "input_shape", "num_classes", "algorithm"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(known))})")
    step_s = _num(data, "step_s", where)
    batch = _num(data, "batch_size", where)
    model = data.get("model")
    tensor_bytes: tuple[int, ...] = ()
    flops = _num(data, "flops_per_sample", where, required=False)
    param_bytes = _num(data, "param_bytes", where, required=False)
    input_shape = data.get("input_shape", (3, 224, 224))
    num_classes = data.get("num_classes", 1000)
    if model is not None:
        from scalelab.workload import WorkloadSpec, describe

        spec = WorkloadSpec(model=str(model), input_shape=input_shape,
                            num_classes=int(num_classes))
        info = describe(spec, flops=False)
        tensor_bytes = tuple(info.tensor_bytes)
        input_shape = spec.input_shape
        if param_bytes is None:
            param_bytes = info.param_bytes
    if param_bytes is None:
        raise UsageError(f"{where}: give model = NAME or param_bytes = N")
    return PlanInput(
        batch_size=batch, step_s=float(step_s), param_bytes=int(param_bytes), source="workload",
        model=model, tensor_bytes=tensor_bytes, flops_per_sample=flops,
        device=data.get("device"), algorithm=data.get("algorithm"),
        io_s=float(_num(data, "io_s", where, required=False) or 0.0),
        batches=((int(batch), float(step_s)),), path=where,
        input_shape=tuple(input_shape), num_classes=int(num_classes),
    )


def load_input(path: str | Path) -> PlanInput:
    """A profile (``.json``) or a workload file (anything else, TOML)."""
    return load_profile(path) if str(path).endswith(".json") else load_workload(path)


# ---------------------------------------------------------------------------------------
# Cluster


@dataclass(frozen=True)
class Cluster:
    """The machines to plan for (DESIGN.md's cluster.toml). Validated on creation."""

    nodes: int = 1
    gpus_per_node: int = 1
    device: str | None = None
    intra_node: str | None = None
    intra_node_gbps: float | None = None
    network: str | None = None
    network_gbps: float | None = None
    architecture: str = "ps"
    local_aggregation: bool = True
    ps: str | int = "auto"
    ps_placement: str = "dedicated"
    ps_network: str | None = None
    ps_network_gbps: float | None = None
    ps_partition: str = "balanced"
    overlap: float | None = None
    latency_s: float | None = None
    full_duplex: bool = False
    price_per_gpu_hour: float | None = None

    def __post_init__(self):
        for name in ("nodes", "gpus_per_node"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UsageError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("intra_node_gbps", "network_gbps", "ps_network_gbps"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not v > 0):
                raise UsageError(f"{name} must be > 0 Gb/s, got {v!r}")
        if self.architecture not in ARCHITECTURES:
            raise UsageError(f"unknown architecture {self.architecture!r} "
                             f"({', '.join(ARCHITECTURES)})")
        if self.ps_placement not in PLACEMENTS:
            raise UsageError(f"unknown ps_placement {self.ps_placement!r} "
                             f"({', '.join(PLACEMENTS)})")
        if self.ps_partition not in sharding.POLICIES:
            raise UsageError(f"unknown ps_partition {self.ps_partition!r} "
                             f"({', '.join(sharding.POLICIES)})")
        if self.ps != "auto":
            try:
                ps = int(self.ps)
            except (TypeError, ValueError):
                raise UsageError(f"ps must be 'auto' or an integer >= 1, got {self.ps!r}") from None
            if ps < 1 or isinstance(self.ps, bool) or ps != float(self.ps):
                raise UsageError(f"ps must be 'auto' or an integer >= 1, got {self.ps!r}")
            object.__setattr__(self, "ps", ps)
        if self.overlap is not None and not 0 <= self.overlap <= 1:
            raise UsageError(f"overlap must be in [0, 1], got {self.overlap}")
        if self.latency_s is not None and not self.latency_s >= 0:
            raise UsageError(f"latency_s must be >= 0, got {self.latency_s}")
        if self.price_per_gpu_hour is not None and not self.price_per_gpu_hour > 0:
            raise UsageError(f"price_per_gpu_hour must be > 0, got {self.price_per_gpu_hour}")
        if self.device is not None:
            object.__setattr__(self, "device", hardware.device(self.device).name)
        if self.network is not None:
            object.__setattr__(self, "network", hardware.network(self.network).name)
        if self.ps_network is not None:
            object.__setattr__(self, "ps_network", hardware.network(self.ps_network).name)
        if self.intra_node is not None:
            object.__setattr__(self, "intra_node", hardware.link(self.intra_node).name)
        if self.network is None and self.network_gbps is None:
            known = ", ".join(hardware.catalog().networks)
            raise UsageError("name the network: network = NAME or network_gbps = X "
                             f"(--network/--network-gbps; known: {known})")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def network_Bps(self) -> float:
        """Per-node NIC, per direction: payload rate of the named network or network_gbps."""
        if self.network_gbps is not None:
            return _gbps_to_Bps(self.network_gbps)
        return hardware.network(self.network).payload_Bps

    def ps_network_Bps(self) -> float:
        if self.ps_network_gbps is not None:
            return _gbps_to_Bps(self.ps_network_gbps)
        if self.ps_network is not None:
            return hardware.network(self.ps_network).payload_Bps
        return self.network_Bps()

    def intra_link(self) -> tuple[float, str]:
        """(bandwidth per direction, how it was chosen)."""
        if self.intra_node_gbps is not None:
            return _gbps_to_Bps(self.intra_node_gbps), f"{self.intra_node_gbps:g} Gb/s (given)"
        if self.intra_node is not None:
            lk = hardware.link(self.intra_node)
            return lk.bandwidth_Bps, lk.title
        if self.device is not None and hardware.device(self.device).intra_node:
            lk = hardware.link(hardware.device(self.device).intra_node)
            return lk.bandwidth_Bps, f"{lk.title} (the {self.device}'s link)"
        lk = hardware.link("pcie3")
        return lk.bandwidth_Bps, f"{lk.title} (assumed: no intra_node given)"

    def network_label(self) -> str:
        if self.network_gbps is not None:
            return f"{self.network_gbps:g} Gb/s"
        return str(self.network)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_CLUSTER_KEYS = {f.name for f in dataclasses.fields(Cluster)}


def load_cluster(path: str | Path | None = None, overrides: dict[str, Any] | None = None
                 ) -> Cluster:
    """Cluster from defaults < ``path`` (cluster.toml) < ``overrides`` (None means unset)."""
    values: dict[str, Any] = {}
    if path is not None:
        where = str(path)
        values = read_toml(path)
        unknown = sorted(set(values) - _CLUSTER_KEYS)
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(_CLUSTER_KEYS))})")
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        if k not in _CLUSTER_KEYS:
            raise UsageError(f"unknown cluster setting {k!r}")
        values[k] = v
        # A name and a rate for the same link: the one given last (the command line) wins.
        for a, b in (("network", "network_gbps"), ("ps_network", "ps_network_gbps"),
                     ("intra_node", "intra_node_gbps")):
            if k == a:
                values.pop(b, None)
            elif k == b:
                values.pop(a, None)
    return Cluster(**values)


# ---------------------------------------------------------------------------------------
# The plan


@dataclass(frozen=True)
class PlanOptions:
    target_efficiency: float = 0.8
    max_gpus: int | None = None
    architectures: tuple[str, ...] | None = None  # default: the cluster's, then the others
    batch_size: int | None = None
    loader_workers: int | None = None
    params: ModelParams | None = None  # calibrated model parameters
    default_mfu: float = DEFAULT_MFU  # assumed efficiency when the source peak is unknown
    precision: str | None = None  # peak to scale by: fp32|tf32|bf16|fp16 (default: algorithm)

    def __post_init__(self):
        if not (isinstance(self.target_efficiency, (int, float))
                and 0 < self.target_efficiency <= 1):
            raise UsageError(f"target efficiency must be in (0, 1], got "
                             f"{self.target_efficiency}")
        if self.max_gpus is not None and (int(self.max_gpus) != self.max_gpus
                                          or self.max_gpus < 1):
            raise UsageError(f"max_gpus must be an integer >= 1, got {self.max_gpus}")
        if self.batch_size is not None and self.batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.loader_workers is not None and self.loader_workers < 0:
            raise UsageError(f"loader_workers must be >= 0, got {self.loader_workers}")
        if not 0 < self.default_mfu <= 1:
            raise UsageError(f"default_mfu must be in (0, 1], got {self.default_mfu}")
        if self.precision is not None and self.precision not in hardware.PRECISIONS:
            raise UsageError(f"unknown precision {self.precision!r} "
                             f"({', '.join(hardware.PRECISIONS)})")
        for a in self.architectures or ():
            if a not in ARCHITECTURES:
                raise UsageError(f"unknown architecture {a!r} ({', '.join(ARCHITECTURES)})")


@dataclass(slots=True)
class SweepRow:
    gpus: int
    nodes: int
    architecture: str
    num_ps: int
    compute_s: float
    comm_s: float
    io_s: float
    step_s: float
    samples_per_s: float
    speedup: float
    efficiency: float
    overhead_ratio: float
    bottleneck: str
    network: str
    form: str
    cost_per_1k_samples: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Recommendation:
    batch_size: int
    algorithm: str | None
    architecture: str
    gpus: int
    num_ps: int
    num_ps_min: int
    network_gbps_needed: float
    loader_workers: int
    reasons: tuple[str, ...]
    intra_node_gbps_needed: float = 0.0
    samples_per_s: float = 0.0
    efficiency: float = 1.0
    cost_per_1k_samples: float | None = None
    cheapest: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["reasons"] = list(self.reasons)
        return d


@dataclass(frozen=True)
class Plan:
    inputs: dict[str, Any]
    sweep: tuple[SweepRow, ...]
    recommendation: Recommendation
    warnings: tuple[str, ...]
    estimate: bool
    params: ModelParams

    def to_dict(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "estimate": self.estimate,
            "model_params": self.params.to_dict(),
            "sweep": [r.to_dict() for r in self.sweep],
            "recommendation": self.recommendation.to_dict(),
            "warnings": list(self.warnings),
        }


def _precision_of(algorithm: str | None) -> str:
    name = (algorithm or "").lower()
    for p in ("bf16", "fp16", "tf32"):
        if p in name:
            return p
    return "fp32"


@dataclass(frozen=True)
class TargetCompute:
    compute_s: float
    estimate: bool
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]


def target_compute(inp: PlanInput, step_s: float, batch_size: int, cluster: Cluster,
                   options: PlanOptions) -> TargetCompute:
    """Compute time on the cluster's device: as measured, or scaled by peak FLOPS.

    Scaled: ``T_target = FLOPs / (peak_target * e)``, with ``e = FLOPs / (T_source *
    peak_source)`` the efficiency measured on the source; when the source's peak is unknown
    (a CPU), ``e`` is the assumed ``options.default_mfu``.
    """
    if cluster.device is None:
        return TargetCompute(step_s, False, (), ())
    target = hardware.device(cluster.device)
    src = hardware.match_device(inp.device) if inp.device else target
    if src is not None and src.name == target.name:
        return TargetCompute(step_s, False, (), ())
    precision = options.precision or _precision_of(inp.algorithm)
    warnings: list[str] = []
    peak_t = target.peak_flops(precision)
    if peak_t is None:
        peak_t = target.peak_flops("fp32")
        if peak_t is None:
            raise UsageError(f"the peak FLOPS of {target.name} are unknown: cannot scale a "
                             f"measurement from {inp.device} to it")
        warnings.append(f"{target.name} has no {precision} peak in the catalog; scaled by FP32")
        precision = "fp32"
    peak_s = src.peak_flops(precision) if src is not None else None
    per_sample = inp.flops_per_sample
    if not per_sample and peak_s is None and inp.model:
        from scalelab.workload import WorkloadSpec, describe

        spec = WorkloadSpec(model=inp.model, input_shape=inp.input_shape,
                            num_classes=inp.num_classes)
        per_sample = describe(spec, flops=True).flops_per_sample
    flops = per_sample * batch_size if per_sample else None
    src_name = src.name if src is not None else repr(inp.device)
    if peak_s is not None:
        e = flops / (step_s * peak_s) if flops else None
        t = step_s * peak_s / peak_t
        how = (f"compute scaled from {src_name} to {target.name}: T = FLOPs/(peak x e) = "
               f"{step_s:.4g} s x {peak_s / 1e12:g}/{peak_t / 1e12:g} TFLOPS ({precision}) "
               f"= {t:.4g} s" + (f" (e = {e:.2f} measured on {src_name})" if e else ""))
        return TargetCompute(t, True, (how,), tuple(warnings))
    if not flops:
        raise UsageError(f"cannot scale a step measured on {inp.device} to {target.name}: "
                         "its peak is unknown and the workload has no FLOPs (name the model)")
    e = options.default_mfu
    t = flops / (peak_t * e)
    how = (f"compute estimated for {target.name}: T = FLOPs/(peak x e) = {flops:.4g}/"
           f"({peak_t / 1e12:g}e12 x {e:g}) = {t:.4g} s")
    warnings.append(
        f"assumption: {src_name} has no known peak, so the model's efficiency on "
        f"{target.name} is taken as {e:g} of its {precision} peak (not measured); "
        "profile on the target device for a measured figure")
    return TargetCompute(t, True, (how,), tuple(warnings))


def _memory_check(inp: PlanInput, batch_size: int, cluster: Cluster) -> str | None:
    """A warning when the profile's memory fit says the batch won't fit the target device.

    Only for a profile measured on a GPU (a CPU's resident memory includes the framework and
    says little about device memory). Fit: memory = intercept + per_sample * b; the largest
    batch within 90% of the target's memory is (0.9 M - intercept) / per_sample.
    """
    if cluster.device is None or inp.fit_memory_bytes is None:
        return None
    src = hardware.match_device(inp.device)
    target = hardware.device(cluster.device)
    if src is None or src.memory_bytes is None or target.memory_bytes is None \
            or src.name == target.name:
        return None
    intercept, per_sample = inp.fit_memory_bytes
    need = intercept + per_sample * batch_size
    budget = 0.9 * target.memory_bytes
    if need <= budget or per_sample <= 0:
        return None
    largest = int((budget - intercept) // per_sample)
    return (f"batch {batch_size} needs about {need / 2**30:.1f} GiB by the profile's memory fit, "
            f"more than 90% of the {target.name}'s {target.memory_bytes / 2**30:.0f} GiB: "
            + (f"use batch <= {largest}" if largest >= 1 else "the model does not fit"))


def _device_counts(max_gpus: int, gpus_per_node: int) -> list[int]:
    """Rows written to the plan: every count up to 64, then powers of two, node multiples."""
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


class _Sweeper:
    """Evaluates one architecture at any device count with the cluster's links."""

    def __init__(self, work: StepWorkload, cluster: Cluster, params: ModelParams,
                 architecture: str, network_Bps: float | None = None,
                 target_efficiency: float = 0.8):
        self.work = work
        self.target = target_efficiency
        self.cluster = cluster
        self.params = params
        self.arch = architecture
        self.nic = cluster.network_Bps() if network_Bps is None else network_Bps
        self.ps_Bps = (self.nic if network_Bps is not None and cluster.ps_network is None
                       and cluster.ps_network_gbps is None else cluster.ps_network_Bps())
        self.intra = cluster.intra_link()[0]
        self.colocated = cluster.ps_placement == "colocated"
        self._ps_cache: dict[int, tuple[int, int]] = {}

    def senders(self, gpus: int) -> int:
        g = self.cluster.gpus_per_node
        nodes = -(-gpus // g)
        return nodes if self.cluster.local_aggregation else gpus

    def sender_Bps(self, gpus: int) -> float:
        g = min(self.cluster.gpus_per_node, gpus)
        return self.nic if self.cluster.local_aggregation else self.nic / g

    def servers(self, gpus: int) -> tuple[int, int]:
        """(lemma minimum, servers used) for dedicated servers at ``gpus`` devices."""
        n_w = self.senders(gpus)
        if n_w in self._ps_cache:
            return self._ps_cache[n_w]
        eff = self.params.bandwidth_efficiency
        s = self.work.param_bytes
        t_c = self.work.compute_s * self.params.compute_scale
        b_ps = self.ps_Bps * eff
        minimum = sizing.ps_servers_needed(s, n_w, b_ps, t_c)
        if self.colocated:
            used = n_w
        elif self.cluster.ps != "auto":
            used = int(self.cluster.ps)
        else:
            # Enough servers for the exchange to fit the time the target efficiency leaves,
            # but no more than it takes for the servers to stop being slower than a
            # worker's own link.
            worker_phase = 2.0 * s / (self.sender_Bps(gpus) * eff)
            allowed = sizing.allowed_comm_s(t_c, self.target, self.params.overlap,
                                            self.work.io_s)
            budget = max(allowed, worker_phase, 1e-12)
            tb = self.work.tensor_bytes or (int(s),)
            policy = self.cluster.ps_partition if self.work.tensor_bytes else "balanced"
            used = sharding.servers_really_needed(tb, n_w, b_ps, budget, policy,
                                                  max_servers=max(4096, minimum))
            if used is None:
                used = len(tb) if policy == sharding.WHOLE_TENSOR else minimum
        self._ps_cache[n_w] = (minimum, used)
        return minimum, used

    def predict(self, gpus: int) -> StepPrediction:
        c = self.cluster
        num_ps = self.servers(gpus)[1] if self.arch == "ps" and gpus > 1 else 1
        return predict_step(
            self.work, self.arch, gpus, num_ps, c.ps_partition, self.colocated,
            self.nic, None if self.colocated else self.ps_Bps, c.latency_s, self.params,
            c.full_duplex, c.gpus_per_node, self.intra, c.local_aggregation,
        )


def _row(gpus: int, arch: str, pred: StepPrediction, batch: int, base_step: float,
         cluster: Cluster, network: str) -> SweepRow:
    sps = gpus * batch / pred.step_s
    speedup = sps / (batch / base_step)
    cost = None
    if cluster.price_per_gpu_hour:
        cost = cluster.price_per_gpu_hour * gpus / 3600.0 / sps * 1000.0
    return SweepRow(
        gpus=gpus, nodes=-(-gpus // cluster.gpus_per_node), architecture=arch,
        num_ps=pred.num_ps if arch == "ps" and gpus > 1 else 0,
        compute_s=pred.compute_s, comm_s=pred.comm_s, io_s=pred.io_s, step_s=pred.step_s,
        samples_per_s=sps, speedup=speedup, efficiency=speedup / gpus,
        overhead_ratio=(pred.step_s - pred.compute_s) / pred.compute_s,
        bottleneck=pred.bottleneck, network=network, form=pred.form, cost_per_1k_samples=cost,
    )


def sweep_architecture(work: StepWorkload, cluster: Cluster, params: ModelParams,
                       architecture: str, counts: Sequence[int], batch_size: int,
                       network_Bps: float | None = None, network: str | None = None,
                       target_efficiency: float = 0.8) -> list[SweepRow]:
    """Rows for ``counts`` devices in one architecture (the sweep the plan writes)."""
    sw = _Sweeper(work, cluster, params, architecture, network_Bps, target_efficiency)
    base = predict_step(work, architecture, 1, 1, params=params).step_s
    label = network or cluster.network_label()
    return [_row(g, architecture, sw.predict(g), batch_size, base, cluster, label)
            for g in counts]


def format_s(t: float) -> str:
    """Seconds for a reader: 2.35 s, 171.0 ms, 352 us."""
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 1e-3 or t == 0:
        return f"{t * 1e3:.1f} ms"
    return f"{t * 1e6:.3g} us"


def _fmt_bytes(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n:,.0f} B"


def plan(source: PlanInput | str | Path, cluster: Cluster,
         options: PlanOptions = PlanOptions()) -> Plan:  # noqa: B008 - frozen default
    """Predict the sweep over device counts and recommend a configuration, with reasons."""
    inp = source if isinstance(source, PlanInput) else load_input(source)
    params = options.params or ModelParams()
    if cluster.overlap is not None:
        params = dataclasses.replace(params, overlap=cluster.overlap)
    if cluster.latency_s is not None:
        params = dataclasses.replace(params, latency_s=cluster.latency_s)
    warnings: list[str] = []
    reasons: list[str] = []
    batch = options.batch_size or inp.batch_size
    measured_step = inp.step_s_at(batch) if batch != inp.batch_size else inp.step_s
    tc = target_compute(inp, measured_step, batch, cluster, options)
    warnings.extend(tc.warnings)
    compute_s = tc.compute_s

    load = inp.load_s_per_batch
    if load:
        workers_needed = theory_io.loader_workers_needed(load, compute_s)
        loaders = workers_needed if options.loader_workers is None else options.loader_workers
        io_s = theory_io.exposed_io_s(load, loaders, compute_s)
    else:
        workers_needed = 0
        loaders = options.loader_workers or 0
        io_s = inp.io_s
    work = StepWorkload(inp.param_bytes, compute_s, io_s, inp.tensor_bytes)
    if cluster.ps_partition == "tensor" and not inp.tensor_bytes:
        raise UsageError("ps_partition 'tensor' needs the model's tensor sizes "
                         "(a profile, or a workload file naming the model)")

    max_gpus = options.max_gpus or cluster.gpus
    archs = options.architectures or (
        cluster.architecture, *[a for a in ARCHITECTURES if a != cluster.architecture])
    full = list(range(1, max_gpus + 1))
    shown = set(_device_counts(max_gpus, cluster.gpus_per_node))
    all_rows: dict[str, list[SweepRow]] = {
        a: sweep_architecture(work, cluster, params, a, full, batch,
                              target_efficiency=options.target_efficiency)
        for a in archs
    }
    sweep = tuple(r for a in archs for r in all_rows[a] if r.gpus in shown)
    target = options.target_efficiency

    # Most devices that keep the target, per architecture; the best is the fastest there.
    best: dict[str, SweepRow] = {}
    for a in archs:
        ok = [r for r in all_rows[a] if r.efficiency >= target - 1e-12]
        best[a] = ok[-1] if ok else all_rows[a][0]
    chosen = max(archs, key=lambda a: (best[a].samples_per_s, a == cluster.architecture))
    rec_row = best[chosen]
    g = rec_row.gpus

    # Batch and algorithm.
    if options.batch_size:
        reasons.append(f"batch_size {batch}: as asked; one device's step {format_s(measured_step)}")
    elif inp.source == "profile":
        reasons.append(f"batch_size {batch}: the profile's recommendation (smallest batch within "
                       f"5% of the best measured throughput), step {format_s(measured_step)}")
    else:
        reasons.append(f"batch_size {batch}: the workload file's measurement, step "
                       f"{format_s(measured_step)}")
    if inp.algorithm:
        reasons.append(f"algorithm {inp.algorithm}: the fastest configuration that fits at "
                       f"batch {batch} in the profile")
    reasons.extend(tc.reasons)

    # Devices.
    r_o = rec_row.overhead_ratio
    if rec_row.efficiency >= target - 1e-12:
        reasons.append(
            f"gpus {g} ({chosen}): most devices up to {max_gpus} with efficiency "
            f"T_C/T = {format_s(rec_row.compute_s)}/{format_s(rec_row.step_s)} = "
            f"{rec_row.efficiency:.3f} >= target {target:g} (R_O = {r_o:.3f}); "
            f"{rec_row.samples_per_s:,.0f} samples/s, speedup {rec_row.speedup:.2f}")
        if g < max_gpus:
            nxt = all_rows[chosen][g]
            reasons.append(
                f"gpus {g + 1} would fall to efficiency {nxt.efficiency:.3f} < {target:g} "
                f"(step {format_s(nxt.step_s)}: compute {format_s(nxt.compute_s)}, exchange "
                f"{format_s(nxt.comm_s)}, input {format_s(nxt.io_s)})")
    else:
        reasons.append(
            f"gpus 1: even one device misses the target efficiency {target:g} "
            f"(T_C/T = {rec_row.efficiency:.3f}, bottleneck {rec_row.bottleneck})")
    if len(archs) > 1:
        others = ", ".join(f"{a} {best[a].samples_per_s:,.0f} samples/s at {best[a].gpus}"
                           for a in archs if a != chosen)
        reasons.append(f"architecture {chosen}: fastest at the target efficiency "
                       f"(vs {others})")
    at_max = {a: all_rows[a][-1] for a in archs}
    top = at_max[cluster.architecture] if cluster.architecture in at_max else at_max[chosen]
    if top.bottleneck != "compute" and top.gpus > 1:
        reasons.append(
            f"at {top.gpus} devices {top.architecture} is {top.bottleneck}-bound: "
            f"exchange {format_s(top.comm_s)} vs compute {format_s(top.compute_s)} per step "
            f"(efficiency {top.efficiency:.3f})")

    # Parameter servers (for the parameter-server configuration at the recommended scale).
    ps_sw = _Sweeper(work, cluster, params, "ps", target_efficiency=target)
    # At the recommended scale when that is a parameter-server setup, else at the full size.
    ps_g = g if (chosen == "ps" and g > 1) else max_gpus
    n_w = ps_sw.senders(ps_g)
    num_ps_min, num_ps = ps_sw.servers(ps_g) if ps_g > 1 else (0, 0)
    b_ps = ps_sw.ps_Bps * params.bandwidth_efficiency
    b_w = ps_sw.sender_Bps(ps_g) * params.bandwidth_efficiency
    s = inp.param_bytes
    if ps_g > 1:
        reasons.append(
            f"num_ps_min {num_ps_min} (parameter servers at {ps_g} devices, N_w = {n_w}): "
            f"lemma N_ps >= ceil(2 S_p N_w/(B_ps T_C)) = ceil(2 x {_fmt_bytes(s)} x {n_w}/"
            f"({b_ps * 8 / 1e9:.3g} Gb/s x {format_s(compute_s)}))")
        need_w = sizing.worker_bandwidth_needed_Bps(s, compute_s)
        if not sizing.worker_link_ok(s, b_w, compute_s):
            reasons.append(
                f"worker link fails B_w >= 2 S_p/T_C = {need_w * 8 / 1e9:.3g} Gb/s "
                f"(has {b_w * 8 / 1e9:.3g} Gb/s): no number of servers hides the exchange")
        if cluster.ps_placement == "colocated":
            reasons.append(f"num_ps {num_ps}: one server on each of the {n_w} worker machines")
        elif cluster.ps != "auto":
            reasons.append(f"num_ps {num_ps}: as configured")
        else:
            bal = _balance(work.tensor_bytes, float(s), max(1, num_ps), cluster.ps_partition)
            fit_s = sizing.allowed_comm_s(compute_s, target, params.overlap, io_s)
            reasons.append(
                f"num_ps {num_ps}: {cluster.ps_partition} placement puts "
                f"{bal.largest_fraction:.1%} on the largest shard (effective servers "
                f"1/max f = {bal.effective_servers:.2f}); enough for the server side to fit "
                f"T_C (1/alpha - 1)/(1 - o) = {format_s(fit_s)}, "
                "or to stop being slower than a worker's own link")
        if inp.tensor_bytes and cluster.ps_partition == "balanced" and num_ps > 1:
            wt = sharding.placement(inp.tensor_bytes, num_ps, sharding.WHOLE_TENSOR)
            if wt.largest_fraction > 1.05 / num_ps:
                reasons.append(
                    f"whole-tensor placement (TensorFlow's greedy strategy) would leave "
                    f"{wt.largest_fraction:.1%} on one of {num_ps} servers (effective "
                    f"{wt.effective_servers:.2f}): split tensors into even chunks")

    # Bandwidth that keeps the target at the full size.
    full_g = max_gpus
    nodes_full = -(-full_g // cluster.gpus_per_node)
    if chosen == "ps":
        link_bytes = 2.0 * s * (1 if cluster.local_aggregation
                                else min(cluster.gpus_per_node, full_g))
        link_what = "each node's NIC carries 2 S_p per step (push-then-pull)"
    elif chosen == "allreduce":
        link_bytes = 2.0 * (full_g - 1) / full_g * s
        link_what = "each ring member sends 2 (N-1)/N S_p"
    else:
        link_bytes = 2.0 * (nodes_full - 1) / max(1, nodes_full) * s
        link_what = "each node sends 2 (n-1)/n S_p across nodes"
    if full_g == 1 or (chosen != "ps" and nodes_full == 1):
        link_bytes = 0.0
    allowed = sizing.allowed_comm_s(compute_s, target, params.overlap, io_s)
    need = sizing.bandwidth_needed_Bps(link_bytes, compute_s, target, params.overlap, io_s)
    need_gbps = need * 8 / 1e9 / params.bandwidth_efficiency
    if link_bytes > 0:
        if math.isfinite(need_gbps):
            reasons.append(
                f"network_gbps_needed {need_gbps:.3g} Gb/s payload per direction for "
                f"{full_g} devices at efficiency {target:g}: {link_what} = "
                f"{_fmt_bytes(link_bytes)} within T_C (1/alpha - 1)/(1 - o) = "
                f"{format_s(allowed)} (cluster has {cluster.network_Bps() * 8 / 1e9:.3g} Gb/s)")
        else:
            reasons.append(f"network_gbps_needed: no bandwidth reaches efficiency {target:g} "
                           f"(the target leaves no time for the exchange)")
    else:
        need_gbps = 0.0
    # The in-node link: a ring over the node's devices moves 2 (g-1)/g S_p per device.
    g_node = min(cluster.gpus_per_node, full_g)
    intra_need_gbps = 0.0
    if g_node > 1:
        intra_bytes = 2.0 * (g_node - 1) / g_node * s
        intra_need = sizing.bandwidth_needed_Bps(intra_bytes, compute_s, target,
                                                 params.overlap, io_s)
        intra_need_gbps = intra_need * 8 / 1e9 / params.bandwidth_efficiency
        intra_has, intra_name = cluster.intra_link()
        if math.isfinite(intra_need_gbps) and intra_need > intra_has * params.bandwidth_efficiency:
            reasons.append(
                f"intra-node link too slow: a ring over {g_node} devices moves "
                f"{_fmt_bytes(intra_bytes)} per step, needing {intra_need / 1e9:.3g} GB/s "
                f"within {format_s(allowed)}; {intra_name} has {intra_has / 1e9:.3g} GB/s")

    # Loader processes.
    if load:
        reasons.append(f"loader_workers {workers_needed}: ceil(t_load/T_C) = "
                       f"ceil({format_s(load)}/{format_s(compute_s)}) hides input loading")
    else:
        reasons.append("loader_workers 0: no input-pipeline time measured (synthetic data)")

    # Cost.
    cheapest = None
    if cluster.price_per_gpu_hour:
        cands = [best[a] for a in archs if best[a].efficiency >= target - 1e-12]
        if cands:
            c = min(cands, key=lambda r: (r.cost_per_1k_samples, -r.samples_per_s))
            cheapest = {"architecture": c.architecture, "gpus": c.gpus,
                        "cost_per_1k_samples": c.cost_per_1k_samples,
                        "samples_per_s": c.samples_per_s}
            reasons.append(
                f"cost: {rec_row.cost_per_1k_samples:.4g} per 1,000 samples at {g} devices "
                f"(price x G / samples_per_s); cheapest meeting the target at its largest "
                f"scale: {c.architecture} on {c.gpus} ({c.cost_per_1k_samples:.4g})")

    memory_note = _memory_check(inp, batch, cluster)
    if memory_note:
        warnings.append(memory_note)

    global_batch = g * batch
    if global_batch > LARGE_BATCH:
        warnings.append(
            f"global batch {global_batch:,} > {LARGE_BATCH:,}: convergence needs learning-rate "
            "scaling and warm-up (Goyal et al., 2017); scalelab predicts speed, not accuracy")
    if tc.estimate:
        warnings.append("estimate: compute time scaled to another device; profile on the "
                        "target device to measure it")
    if options.params is not None:
        reasons.append("model parameters from calibration: " + ", ".join(
            f"{k}={v:g}" for k, v in params.to_dict().items()))

    rec = Recommendation(
        batch_size=batch, algorithm=inp.algorithm, architecture=chosen, gpus=g,
        num_ps=num_ps, num_ps_min=num_ps_min, network_gbps_needed=need_gbps,
        loader_workers=workers_needed, reasons=tuple(reasons),
        intra_node_gbps_needed=intra_need_gbps,
        samples_per_s=rec_row.samples_per_s, efficiency=rec_row.efficiency,
        cost_per_1k_samples=rec_row.cost_per_1k_samples, cheapest=cheapest,
    )
    inputs = {
        "input": inp.to_dict(),
        "cluster": cluster.to_dict(),
        "options": {"target_efficiency": target, "max_gpus": max_gpus,
                    "architectures": list(archs), "batch_size": batch,
                    "loader_workers": options.loader_workers,
                    "default_mfu": options.default_mfu},
        "compute_s": compute_s,
        "io_s": io_s,
        "network_Bps": cluster.network_Bps(),
        "ps_network_Bps": cluster.ps_network_Bps(),
        "intra_node_Bps": cluster.intra_link()[0],
        "intra_node": cluster.intra_link()[1],
        "bandwidth_convention": "payload per direction (catalog payload_gbps, or the Gb/s given)",
    }
    if "pcie3" in cluster.intra_link()[1] and "assumed" in cluster.intra_link()[1] \
            and cluster.gpus_per_node > 1:
        warnings.append("no intra-node link given: assumed PCIe 3.0 x16")
    return Plan(inputs, sweep, rec, tuple(warnings), tc.estimate, params)


def network_sweep(work: StepWorkload, cluster: Cluster, networks: Sequence[str],
                  counts: Sequence[int], batch_size: int,
                  architectures: Sequence[str] = ARCHITECTURES,
                  params: ModelParams = ModelParams(),  # noqa: B008 - frozen default
                  target_efficiency: float = 0.8) -> list[SweepRow]:
    """Rows for every (network, architecture, count): the plot's and the benchmark's grid."""
    rows: list[SweepRow] = []
    for name in networks:
        bps = hardware.network(name).payload_Bps
        for a in architectures:
            rows.extend(sweep_architecture(work, cluster, params, a, counts, batch_size,
                                           network_Bps=bps, network=name,
                                           target_efficiency=target_efficiency))
    return rows


__all__ = [
    "ARCHITECTURES", "BOTTLENECKS", "Cluster", "ModelParams", "Plan", "PlanInput",
    "PlanOptions", "Recommendation", "StepPrediction", "StepWorkload", "SweepRow",
    "load_calibration", "load_cluster", "load_input", "load_profile",
    "load_workload", "network_sweep", "plan", "predict_step", "sweep_architecture",
    "target_compute", "workload_from_dict",
]
