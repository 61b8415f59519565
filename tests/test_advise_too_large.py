"""advise on a model that fits no batch of one device: the layout, devices and batch that
fit, from the model's memory, instead of an error."""

import json

import pytest

from scalelab.cli import main
from scalelab.plan.layouts import layout_memory, sizes_from_components
from scalelab.profiler.memory import memory_components
from scalelab.theory import zero
from scalelab.theory.memory import usable_bytes
from scalelab.workload import WorkloadSpec

MODEL = "tests.toy_large:wide_mlp"
BUDGET = 8 * 2**20


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALELAB_CACHE", str(tmp_path / "cache"))


def test_a_model_too_large_for_the_budget_gets_a_layout_that_fits(tmp_path, cache, capsys):
    out = tmp_path / "out"
    rc = main(["advise", MODEL, "--input-shape", "512", "--num-classes", "10",
               "--memory-budget", "8MiB", "--batch-sizes", "1", "--out", str(out), "--json",
               "--cluster", "cluster-1x8-pcie"])
    assert rc == 0
    got = json.loads(capsys.readouterr().out)
    fit = got["layout_advice"]
    assert any("too small for batch 1" in w for w in got["warnings"])  # the profile's refusal
    lay, n, b = fit["layout"], fit["gpus"], fit["batch_size"]
    assert lay in ("zero2", "zero3") and n >= 2 and b >= 1
    assert f"--workers {n} --architecture fsdp --zero {lay[-1]} --batch-size {b}" \
        in fit["launch"]
    # the advice fits, and is the fewest devices and the largest batch
    sizes = sizes_from_components(memory_components(
        WorkloadSpec(MODEL, input_shape=(512,), num_classes=10)))
    limit = usable_bytes(BUDGET)
    assert layout_memory(sizes, 1, "ddp", 1).total_bytes > limit
    assert layout_memory(sizes, n, lay, b).total_bytes <= limit
    assert layout_memory(sizes, n, lay, b + 1).total_bytes > limit
    assert all(layout_memory(sizes, n - 1, other, 1).total_bytes > limit
               for other in zero.LAYOUTS)
    assert fit["reason"].startswith(f"layout {lay} on {n} devices at batch {b}")
    assert "7.20 MiB usable of 8.00 MiB" in fit["reason"]


def test_the_console_says_it_in_one_block(tmp_path, cache, capsys):
    rc = main(["advise", MODEL, "--input-shape", "512", "--num-classes", "10",
               "--memory-budget", "8MiB", "--batch-sizes", "1", "--out", str(tmp_path / "o"),
               "--cluster", "cluster-1x8-pcie"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "no batch fits one device" in text and "launch: scalelab run" in text
    assert "--architecture fsdp --zero" in text
