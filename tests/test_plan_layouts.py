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
    assert ddp.bucket_bytes == 0  # the gradients are views of DDP's buckets
    assert ddp.total_bytes == 3 * 4 * 21000 + 800
    copies = layout_memory(sizes, 4, "ddp", 8, ddp_bucket_copies=True)
    assert copies.total_bytes == ddp.total_bytes + 4 * 21000  # torch's default copies
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
    mem = 24 * 2**30
    ddp = layout_memory(sizes, 8, "ddp", 1)
    assert ddp.state.total_bytes == 24e9 and ddp.largest_batch(mem) == 0  # 24 > 21.6 GiB
    fit = layout_that_fits(sizes, 8, 16, mem)
    assert fit is not None and fit.layout == "zero1"
    z1 = layout_memory(sizes, 8, "zero1", 16)
    assert z1.total_bytes == pytest.approx(6e9 + 18e9 / 8 + 8e9)
    assert z1.largest_batch(mem) == int((usable_bytes(mem) - z1.fixed_bytes) // 0.5e9)
    assert layout_that_fits(sizes, 8, 10_000, mem) is None
    line = explain(z1, mem)
    assert "ZeRO-1" in line and "against 21.60 GiB usable of 24.00 GiB" in line


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


# -- the plan's memory check on the target device, whatever the profile's device --------

def _plan(inp, device, gpus=8, batch=None):
    from scalelab.plan import PlanOptions
    from scalelab.plan.cluster import Cluster
    from scalelab.plan.recommend import plan

    cluster = Cluster(nodes=1, gpus_per_node=gpus, device=device)
    return plan(inp, cluster, PlanOptions(batch_size=batch) if batch else PlanOptions())


def test_vgg16_at_512_from_a_cpu_workload_on_a_16gb_v100_is_refused_with_the_reason():
    from scalelab.plan.inputs import workload_from_dict

    inp = workload_from_dict({"model": "vgg16", "batch_size": 512, "step_s": 40.0,
                              "device": "cpu"})
    p = _plan(inp, "V100-SXM2-16GB", batch=512)
    notes = [w.text for w in p.warnings if "does not fit the V100-SXM2-16GB" in w.text]
    assert len(notes) == 1, p.warnings
    note = notes[0]
    assert "batch 512 per device" in note and "activations 35.27" in note
    assert "usable of 16.00 GiB" in note and "fits at most batch" in note


def test_resnet50_at_256_on_h100_from_a_cpu_profile_that_tried_only_batch_4(tmp_path):
    from scalelab.plan.inputs import load_profile
    from scalelab.profiler.memory import memory_components
    from scalelab.results import write_json
    from scalelab.workload import WorkloadSpec
    from tests.toy_plan import profile_dict

    prof = profile_dict(step_s=1.6, batch=4, param_bytes=102_228_128)
    prof["workload"].update(model="resnet50", input_shape=[3, 224, 224], num_classes=1000)
    prof["max_batch_size"] = 4  # the largest batch asked for, not a memory limit:
    prof["max_batch_is_memory_limit"] = False
    prof["memory_components"] = memory_components(WorkloadSpec("resnet50"))
    path = tmp_path / "profile.json"
    write_json(path, "profile", prof)
    inp = load_profile(path)
    assert inp.max_batch_size is None and inp.memory_components is not None
    p = _plan(inp, "H100-SXM", batch=256)
    assert p.recommendation.batch_size == 256
    texts = [w.text for w in p.warnings]
    assert not [w for w in texts if "fit" in w and "memory" in w.lower()], texts
    # the same profile on a 16 GB V100 at 256 is objected to
    p16 = _plan(inp, "V100-SXM2-16GB", batch=256)
    assert any("does not fit the V100-SXM2-16GB" in w.text for w in p16.warnings)


def test_a_model_too_large_for_one_device_gets_a_layout_that_fits():
    from types import SimpleNamespace

    from scalelab.plan.layouts import target_memory_note

    # 2B parameters of fp32 SGD with momentum: 8 + 8 + 8 + 8 (buckets) GB > 16 GiB
    comp = {"param_count": 2_000_000_000, "param_bytes": 8e9, "grad_bytes": 8e9,
            "optimizer_bytes": 8e9, "activation_bytes_per_sample": 50e6,
            "input_bytes_per_sample": 6e5, "tensor_shapes": [[40_000, 50_000]],
            "unit_params": [50_000_000] * 40}
    inp = SimpleNamespace(memory_components=comp, model=None, device="cpu",
                          input_shape=(3, 224, 224), num_classes=1000)
    note = target_memory_note(inp, 8, SimpleNamespace(device="V100-SXM2-16GB", gpus=8))
    assert "does not fit even at batch 1 with plain data parallelism" in note
    assert "it fits with ZeRO-2" in note and "on 8 GPU(s) at batch 8" in note
    one = target_memory_note(inp, 8, SimpleNamespace(device="V100-SXM2-16GB", gpus=1))
    assert "ZeRO-3 needs 2 devices for batch 1" in one
    fits = target_memory_note(inp, 8, SimpleNamespace(device="H200", gpus=8))
    assert fits == ""


def test_layout_rows_memory_batch_exchange_and_exposed():
    from scalelab.plan.layouts import layout_rows
    from scalelab.theory.comm import ring_allreduce_s

    # 1B fp32 parameters in 20 equal units, SGD momentum; 8 ranks on 80 GiB, 10 GB/s links
    sizes = ModelSizes(((1_000_000, 1000),), unit_params=(50_000_000,) * 20,
                       per_sample_bytes=0.2e9)
    rows = {r.layout: r for r in layout_rows(sizes, 8, 16, 80 * 2**30, 10e9,
                                             forward_s=0.5, backward_s=1.0)}
    assert rows["ddp"].exchange_s == pytest.approx(ring_allreduce_s(4e9, 8, 10e9))
    assert rows["zero2"].exchange_bytes == pytest.approx(rows["ddp"].exchange_bytes)
    assert rows["zero3"].exchange_bytes == pytest.approx(1.5 * rows["ddp"].exchange_bytes)
    assert rows["zero1"].exchange_bytes == pytest.approx(1.5 * rows["ddp"].exchange_bytes)
    batches = [rows[lay].largest_batch for lay in ("ddp", "zero1", "zero2", "zero3")]
    assert batches == sorted(batches) and batches[0] < batches[-1]
    # 0.7 s of all-reduce behind 1 s of backward in 25 MiB buckets: only the last shows
    from scalelab.theory.comm import DDP_BUCKET_BYTES

    k = -(-4_000_000_000 // DDP_BUCKET_BYTES)
    assert rows["ddp"].exposed_s == pytest.approx(rows["ddp"].exchange_s / k)
    # ZeRO-3 gathers twice: more of it shows than ZeRO-2's; neither shows all of it
    assert 0 < rows["zero2"].exposed_s < rows["zero3"].exposed_s < rows["zero3"].exchange_s
    one = layout_rows(sizes, 1, 16, 80 * 2**30, 10e9, 0.5, 1.0)
    assert all(r.exchange_s == 0 and r.exposed_s == 0 for r in one)


def test_the_headline_and_tiles_say_nothing_of_memory_when_the_batch_is_accumulated():
    from scalelab.plan import story
    from scalelab.plan.inputs import workload_from_dict

    inp = workload_from_dict({"model": "vgg16", "batch_size": 512, "step_s": 40.0,
                              "device": "cpu"})
    data = _plan(inp, "V100-SXM2-16GB", batch=512).to_dict()
    rec = data["recommendation"]  # 512 per device, as micro-batches the device holds
    assert rec["micro_batch"] * rec["accumulation"] == 512 and rec["accumulation"] > 1
    assert story.unfit(rec) is None and "does not fit" not in story.headline(data)
    # a batch the device holds says nothing of memory
    fits = _plan(workload_from_dict({"model": "vgg16", "batch_size": 64, "step_s": 5.0,
                                     "device": "cpu"}), "V100-SXM2-16GB").to_dict()
    assert story.unfit(fits["recommendation"]) is None
    assert "does not fit" not in story.headline(fits) and "memory" not in dict(story.cards(fits))
