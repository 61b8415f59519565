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
