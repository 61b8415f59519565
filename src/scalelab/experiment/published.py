"""Predicted against published: one node's 2-8 GPU throughput from its 1-GPU throughput.

Each published series (``tests/data/published_scaling.toml``: model, device, precision,
per-GPU batch, the exchange used, and samples/s at 1, 2, 4, 8 GPUs of one machine, with its
source) is replayed through the plan: T_C = b / (samples/s at 1 GPU), the gradient bytes
from the model (fp32 gradients, as those frameworks exchanged them), and the node described
as its owner would:

- ``ps-host-cpu``: one parameter server on the host CPU (TensorFlow's
  ``variable_update=parameter_server, local_parameter_device=cpu``): colocated, every GPU a
  sender, each GPU's bytes over its host link; GPUs behind one PCIe switch share its uplink
  (the device's platform: 2 per switch on DGX-1 and on a dual-GPU K80 board).
- ``ps-gpu``: the variables spread over the GPUs, one server per GPU: each GPU exchanges
  with the others over the device link (the colocated form with one device per server).
- ``allreduce-nccl``: NCCL ring all-reduce over the device link, DDP's bucket overlap. NCCL
  2 and later build rings over all of a GPU's links; where a series' library did not, its
  ``ring_links`` names, per GPU count after the first, the link of the ring's slowest hop
  (NCCL 1.x: one ring in device order, one link per hop, a hop between GPUs that are not
  CUDA peers through host memory).
- ``replicated-gpu-copies``: every GPU holds the model and gradients are summed by
  device-to-device copies: the all-reduce's bytes over the device link.

TensorFlow 1.x (``framework = "tensorflow"``, in-graph replication as tf_cnn_benchmarks ran
it in 2017) does not overlap an exchange with the backward that follows: a GPU-to-GPU or
GPU-to-host copy is enqueued on the sender's compute stream behind every kernel already
queued there (``GPUUtil::DeviceToDeviceCopy`` and ``CopyGPUTensorToCPU`` in
tensorflow/core/common_runtime/gpu/gpu_util.cc at 02084099), and an NCCL collective's stream
waits for all of each compute stream (``nccl_stream->stream->ThenWaitFor(p->tensor_stream)``
in tensorflow/contrib/nccl/kernels/nccl_manager.cc at 01fc22e6). With the host queueing
kernels far ahead of the GPU, that is the whole backward; so those series get overlap 0 (as
the parameter-server exchange always has), where PyTorch DDP's buckets are derived.

Series measured on real data (a JPEG decoding pipeline whose cost the sources do not state)
are input-bound in ways the exchange model does not see; they are reported apart.
"""

from __future__ import annotations

import statistics
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from scalelab import hardware
from scalelab.plan import Cluster, PlanOptions, plan, workload_from_dict
from scalelab.theory.units import Bps_to_gbps

EXCHANGES = ("ps-host-cpu", "ps-gpu", "allreduce-nccl", "replicated-gpu-copies")


@dataclass(frozen=True)
class ScalingPoint:
    """One published multi-GPU figure and the plan's prediction of it."""

    model: str
    device: str
    precision: str
    batch: int
    exchange: str
    data: str
    gpus: int
    measured_samples_per_s: float
    predicted_samples_per_s: float
    source: str

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_samples_per_s / self.measured_samples_per_s - 1.0

    @property
    def synthetic(self) -> bool:
        return self.data == "synthetic"


def load_series(path: str | Path) -> list[dict]:
    with open(path, "rb") as f:
        return list(tomllib.load(f)["series"])


@lru_cache(maxsize=64)
def _grad_bytes(model: str) -> int:
    from scalelab.opcount import describe
    from scalelab.workload import WorkloadSpec

    shape = (3, 299, 299) if model == "inception_v3" else (3, 224, 224)
    return describe(WorkloadSpec(model=model, input_shape=shape), flops=False).param_bytes


def node_cluster(series: dict, gpus: int) -> Cluster:
    """The machine of a series as a cluster file would describe it, at ``gpus`` devices."""
    dev = hardware.device(series["device"])
    exchange = series["exchange"]
    if exchange not in EXCHANGES:
        raise ValueError(f"unknown exchange {exchange!r} ({', '.join(EXCHANGES)})")
    intra = dev.intra_node or "pcie3"
    if exchange == "ps-gpu":
        # a server on every GPU; the GPUs exchange over the device link
        link = hardware.link(intra)
        return Cluster(nodes=gpus, gpus_per_node=1, device=dev.name, architecture="ps",
                       ps_placement="colocated", network_gbps=Bps_to_gbps(link.bandwidth_Bps),
                       host_link=intra)
    if exchange == "ps-host-cpu":
        return Cluster(nodes=1, gpus_per_node=gpus, device=dev.name, intra_node=intra,
                       network="10GbE", architecture="ps", ps_placement="colocated",
                       local_aggregation=False)
    overlap = 0.0 if series.get("framework") == "tensorflow" else None
    return Cluster(nodes=1, gpus_per_node=gpus, device=dev.name,
                   intra_node=_ring_link(series, gpus) or intra, network="10GbE",
                   architecture="allreduce", overlap=overlap)


def _ring_link(series: dict, gpus: int) -> str | None:
    """The link of the ring's slowest hop at ``gpus`` from the series' ``ring_links``."""
    links = series.get("ring_links")
    if links is None:
        return None
    counts = list(series["gpus"])[1:]
    if len(links) != len(counts):
        raise ValueError(f"{series['model']} on {series['device']}: ring_links has "
                         f"{len(links)} entries for {len(counts)} GPU counts above one")
    return links[counts.index(gpus)]


def predict_series(series: dict) -> list[ScalingPoint]:
    """The plan's throughput at every published GPU count above one."""
    gpus, sps = list(series["gpus"]), [float(x) for x in series["samples_per_s"]]
    if gpus[0] != 1:
        raise ValueError(f"{series['model']} on {series['device']}: a series starts at 1 GPU")
    b = int(series["batch"])
    inp = workload_from_dict({"param_bytes": _grad_bytes(series["model"]), "batch_size": b,
                              "step_s": b / sps[0], "device": series["device"]})
    arch = "ps" if series["exchange"].startswith("ps-") else "allreduce"
    out = []
    for g, measured in zip(gpus[1:], sps[1:]):
        cluster = node_cluster(series, g)
        p = plan(inp, cluster, PlanOptions(architectures=(arch,), target_efficiency=0.5))
        row = next(r for r in p.sweep if r.gpus == cluster.gpus)
        out.append(ScalingPoint(series["model"], series["device"], series["precision"], b,
                                series["exchange"], series.get("data", ""), g, measured,
                                row.samples_per_s, series["source"]))
    return out


def same_node(path: str | Path) -> list[ScalingPoint]:
    """Every point of every series in ``path``."""
    return [pt for s in load_series(path) for pt in predict_series(s)]


def error_summary(points: list[ScalingPoint]) -> tuple[float, float]:
    """(median |error|, max |error|)."""
    errs = [abs(p.error) for p in points]
    if not errs:
        raise ValueError("no points")
    return statistics.median(errs), max(errs)


def predict_point(series: dict, gpus: int) -> float:
    """The plan's samples/s for one published point (``gpus`` = 1 returns the measurement)."""
    if gpus == 1:
        return float(series["samples_per_s"][0])
    for pt in predict_series(series):
        if pt.gpus == gpus:
            return pt.predicted_samples_per_s
    raise ValueError(f"{series['model']} on {series['device']}: no published point at {gpus}")
