"""One node's 2-8 GPU throughput predicted from its 1-GPU throughput, against published
runs the model was not fitted to (tests/data/published_scaling.toml, each with its source).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scalelab.experiment import published

DATA = Path(__file__).resolve().parent / "data" / "published_scaling.toml"


@pytest.fixture(scope="module")
def points():
    return published.same_node(DATA)


def test_every_series_is_predicted(points):
    series = published.load_series(DATA)
    assert len(points) == sum(len(s["gpus"]) - 1 for s in series)
    assert {p.exchange for p in points} >= {"ps-host-cpu", "ps-gpu", "allreduce-nccl"}


def test_same_node_scaling_median_within_5_percent(points):
    median, _ = published.error_summary([p for p in points if p.synthetic])
    assert median <= 0.05


@pytest.mark.parametrize("exchange", ["ps-host-cpu", "ps-gpu", "allreduce-nccl"])
def test_each_exchange_is_predicted(points, exchange):
    sel = [p for p in points if p.synthetic and p.exchange == exchange]
    assert sel
    median, _ = published.error_summary(sel)
    assert median <= 0.08, [(p.model, p.device, p.gpus, round(p.error, 3)) for p in sel]


def test_same_node_scaling_nearly_all_within_15_percent(points):
    sel = [p for p in points if p.synthetic]
    within = sum(abs(p.error) <= 0.15 for p in sel) / len(sel)
    assert within >= 0.95


def test_a_host_cpu_server_is_not_charged_to_the_nic(points):
    # DGX-1 P100, ResNet-50 b64 through a parameter server on the host CPU: 7.92x published
    p = next(p for p in points if p.model == "resnet50" and p.device == "P100-SXM2-16GB"
             and p.exchange == "ps-host-cpu" and p.batch == 64 and p.gpus == 8)
    assert p.predicted_samples_per_s / 219 > 7.0
    assert abs(p.error) < 0.10


def _series(model, device, exchange):
    return next(s for s in published.load_series(DATA) if s["model"] == model
                and s["device"] == device and s["exchange"] == exchange)


def test_a_tensorflow_1_exchange_is_not_overlapped_and_pytorch_ddp_is_derived():
    tf = _series("alexnet", "P100-SXM2-16GB", "allreduce-nccl")
    ddp = _series("resnet50", "H100-SXM", "allreduce-nccl")
    assert published.node_cluster(tf, 4).overlap == 0.0
    assert published.node_cluster(ddp, 4).overlap is None


def test_an_nccl1_ring_is_charged_to_its_slowest_hop():
    # DGX-1 P100, NCCL 1.x: one NVLink per hop inside a group of four, host memory at 8
    s = _series("alexnet", "P100-SXM2-16GB", "allreduce-nccl")
    assert published.node_cluster(s, 2).intra_node == "nvlink1-x1"
    assert published.node_cluster(s, 8).intra_node == "pcie3"
    pts = {p.gpus: p for p in published.predict_series(s)}
    # published 5.97x at 8 GPUs; the four links at 80 GB/s, overlapped, predicted 7.98x
    assert pts[8].predicted_samples_per_s / 2987 < 7.0
    assert all(abs(p.error) < 0.16 for p in pts.values()), {g: p.error for g, p in pts.items()}


def test_ring_links_must_name_one_link_per_gpu_count():
    s = dict(_series("vgg16", "P100-SXM2-16GB", "allreduce-nccl"), ring_links=["pcie3"])
    with pytest.raises(ValueError, match="ring_links has 1 entries for 3 GPU counts"):
        published.node_cluster(s, 8)
