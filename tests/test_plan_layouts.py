"""The plan's layouts: memory per rank by component, the batch that fits, the layout that
fits; activations counted on meta tensors equal those counted on real ones."""

import pytest
import torch

from scalelab.plan.layouts import ModelSizes, all_layouts, explain, layout_memory, layout_that_fits
from scalelab.profiler.memory import activation_bytes
from scalelab.theory import zero
from scalelab.theory.memory import usable_bytes


def test_components_add_up_and_the_exact_split_sums_to_the_even_one():
    sizes = ModelSizes(((1000, 10), (1000,), (10, 1000)), unit_params=(11000, 10000),
                       per_sample_bytes=100.0)
    ddp = layout_memory(sizes, 4, "ddp", 8)
    assert ddp.bucket_bytes == 4 * 21000  # DDP's gradient buckets copy the gradients
    assert ddp.total_bytes == 3 * 4 * 21000 + 4 * 21000 + 800
    z3 = layout_memory(sizes, 4, "zero3", 8)
    assert z3.state.total_bytes == 3 * 4 * 21000 / 4
    assert z3.transient_bytes == zero.transient_bytes([11000, 10000], 4, "zero3",
                                                      param_bytes_per_param=4,
                                                      grad_bytes_per_param=4)
    exact = [layout_memory(sizes, 4, "zero3", 8, rank=r).state.total_bytes for r in range(4)]
    assert sum(exact) == 4 * z3.state.total_bytes
    totals = [m.total_bytes for m in all_layouts(sizes, 4, 8)]
    assert totals[0] > totals[1] > totals[2]
    # with two units, ZeRO-3 gathers both (prefetch): more at its peak than ZeRO-2 here
    assert totals[3] > totals[2]


def test_largest_batch_and_the_layout_that_fits():
    # 1.5B parameters, mixed-precision Adam (2 + 2 + 12 bytes/param), 8 ranks, 40 GB each
    sizes = ModelSizes(((1_500_000, 1000),), unit_params=(50_000_000,) * 30,
                       per_sample_bytes=0.5e9, param_bytes_per_param=2,
                       grad_bytes_per_param=2, optimizer_bytes_per_param=12)
    mem = 24e9
    ddp = layout_memory(sizes, 8, "ddp", 1)
    assert ddp.state.total_bytes == 24e9 and ddp.largest_batch(mem) == 0  # 24 + 3 (buckets) > 21.6
    fit = layout_that_fits(sizes, 8, 16, mem)
    assert fit is not None and fit.layout == "zero1"
    z1 = layout_memory(sizes, 8, "zero1", 16)
    assert z1.total_bytes == pytest.approx(6e9 + 18e9 / 8 + 8e9)
    assert z1.largest_batch(mem) == int((usable_bytes(mem) - z1.fixed_bytes) // 0.5e9)
    assert layout_that_fits(sizes, 8, 10_000, mem) is None
    line = explain(z1, mem)
    assert "ZeRO-1" in line and "against 21.60 GB usable of 24.00 GB" in line


def test_activations_on_meta_equal_those_on_the_cpu():
    from tests.toy_runner import convnet

    counts = []
    for dev in ("cpu", "meta"):
        with torch.device(dev):
            torch.manual_seed(0)
            m = convnet()
            x = torch.randn(5, 1, 6, 6)
        counts.append(activation_bytes(m, x, lambda o: o.sum()))
    assert counts[0] == counts[1] > 0
    # the saved tensors grow with the batch and leave out the parameters
    with torch.device("meta"):
        m = convnet()
        one = activation_bytes(m, torch.empty(1, 1, 6, 6))
        ten = activation_bytes(m, torch.empty(10, 1, 6, 6))
    assert ten == 10 * one
