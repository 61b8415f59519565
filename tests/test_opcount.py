import time

import pytest
import torch

from scalelab import opcount
from scalelab.opcount import describe, step_ops
from scalelab.workload import WorkloadSpec


def test_flops_match_flop_counter_and_scale_with_batch():
    spec = WorkloadSpec("resnet18", input_shape=(3, 64, 64), num_classes=10)
    s4, s8 = step_ops(spec, 4), step_ops(spec, 8)
    per_sample = describe(spec).flops_per_sample
    train = s4.phase_flops("forward") + s4.phase_flops("backward")
    # the first convolution needs no input gradient: a little under 3x forward
    assert train == pytest.approx(per_sample * 4, rel=0.01)
    assert 2.9 < train / s4.phase_flops("forward") <= 3.0
    assert s8.phase_flops("forward") == pytest.approx(2 * s4.phase_flops("forward"), rel=1e-9)
    assert s8.phase_flops("backward") == pytest.approx(2 * s4.phase_flops("backward"), rel=1e-9)
    assert s4.phase_flops("backward") > s4.phase_flops("forward") > 0


def test_grouped_convolution_backward_counts_one_forward_per_gradient():
    """A depthwise convolution's backward: one forward per gradient it computes; as the
    model's first layer only the weight's (torch's registry formula counts 32x that)."""
    spec = WorkloadSpec("tests.toy_opcount:depthwise", input_shape=(32, 16, 16),
                        num_classes=4)
    s = step_ops(spec, 2)
    fwd = [o for o in s.ops if o.name == "convolution"]
    bwd = [o for o in s.ops if o.name == "convolution_backward"]
    assert len(fwd) == len(bwd) == 1
    assert fwd[0].flops == 2 * 2 * 32 * 16 * 16 * 9  # 2 FLOPs x N x C x H x W x 3x3
    assert bwd[0].flops == fwd[0].flops


def test_bytes_and_tensor_core_ops():
    s = step_ops(WorkloadSpec("resnet18", input_shape=(3, 32, 32), num_classes=10), 2)
    convs = [o for o in s.ops if o.name == "convolution"]
    assert len(convs) == 20 and all(o.tensor_core for o in convs)
    bn = [o for o in s.ops if o.name.startswith("native_batch_norm")]
    assert bn and all(o.flops == 0 and o.bytes_fp32 > 0 and not o.tensor_core for o in bn)
    # the first convolution reads a 2x3x32x32 input and 64x3x7x7 weight, writes 2x64x16x16
    first = convs[0]
    assert first.bytes_fp32 == 4 * (2 * 3 * 32 * 32 + 64 * 3 * 7 * 7 + 2 * 64 * 16 * 16)
    assert not any(o.name in ("view", "t", "detach") for o in s.ops)


def test_optimizer_is_one_entry_with_foreach_kernels():
    s = step_ops(WorkloadSpec("resnet18", input_shape=(3, 32, 32), num_classes=10), 2)
    opt = [o for o in s.ops if o.phase == "optimizer"]
    assert len(opt) == 1
    n = s.param_count
    assert opt[0].bytes_fp32 == 5 * 4 * n and opt[0].flops == 3 * n
    assert opt[0].kernels == 3 * 1  # 62 tensors: one foreach group, three passes
    adam = step_ops(WorkloadSpec("resnet18", input_shape=(3, 32, 32), num_classes=10,
                                 optimizer="adam"), 2)
    assert [o for o in adam.ops if o.phase == "optimizer"][0].bytes_fp32 == 7 * 4 * n


def test_resnet50_fast_and_deterministic():
    opcount._count.cache_clear()
    t0 = time.perf_counter()
    a = step_ops("resnet50", 64)
    elapsed = time.perf_counter() - t0
    opcount._count.cache_clear()
    b = step_ops("resnet50", 64)
    assert a == b and step_ops("resnet50", 64) is b  # cached
    assert elapsed < 10.0, f"counting resnet50 took {elapsed:.1f} s"
    # about 4.1 GMAC forward per 224x224 image, counted as 2 FLOPs each
    assert a.phase_flops("forward") / 64 == pytest.approx(8.2e9, rel=0.02)


def test_bad_inputs():
    with pytest.raises(ValueError, match=">= 2"):
        step_ops("resnet18", 1)
    with pytest.raises(ValueError, match="integer"):
        step_ops("resnet18", 2.5)
    with pytest.raises(ValueError):
        step_ops("no_such_model_xyz", 4)


def test_larger_batches_derived_exactly_from_two_traces():
    spec = WorkloadSpec("resnet18", input_shape=(3, 32, 32), num_classes=10)
    derived = step_ops(spec, 24)
    traced = opcount._trace(spec, 24)
    assert derived.ops == traced.ops and derived.batch_size == 24


def test_attention_is_the_fused_kernel_a_gpu_runs():
    """vit_b_16's attention: one memory-efficient attention op forward and one backward per
    layer (a GPU's SDPA never writes the scores), no softmax or batched products left over."""
    s = step_ops(WorkloadSpec("vit_b_16"), 2)
    fwd = [o for o in s.ops if o.name == "_scaled_dot_product_efficient_attention"]
    bwd = [o for o in s.ops if o.name == "_scaled_dot_product_efficient_attention_backward"]
    assert len(fwd) == len(bwd) == 12
    assert all(o.op_class == "attention" and o.tensor_core for o in fwd + bwd)
    assert not any(o.name in ("_softmax", "_safe_softmax", "bmm") for o in s.ops)
    # Q, K, V and the output (2 x 12 heads x 197 tokens x 64 at fp32) and the log-sum-exp,
    # far below the 2 x 12 x 197 x 197 scores the math path writes and reads
    qkvo = 4 * 4 * 2 * 12 * 197 * 64
    assert qkvo <= fwd[0].bytes_fp32 < qkvo + 4 * 2 * 12 * 197 * 197
    # 4 b h s^2 d FLOPs forward (two products), 2.5x that backward
    assert fwd[0].flops == pytest.approx(4 * 2 * 12 * 197 * 197 * 64)
    assert bwd[0].flops == pytest.approx(2.5 * fwd[0].flops)
    assert not any(o.name.startswith(("empty", "new_empty")) for o in s.ops)
    assert torch_sdpa_restored()


def torch_sdpa_restored() -> bool:
    import torch

    return torch.nn.functional.scaled_dot_product_attention is opcount._SDPA


@pytest.mark.parametrize("model,shape", [("resnet18", (3, 64, 64)),
                                         ("mobilenet_v3_small", (3, 64, 64)),
                                         ("densenet121", (3, 64, 64)),
                                         ("convnext_tiny", (3, 64, 64)),
                                         ("vit_b_16", (3, 224, 224))])
def test_outputs_made_from_shapes_are_pytorchs(monkeypatch, model, shape):
    """Every output :mod:`scalelab.metashapes` makes has the shape, strides and dtype of the
    one PyTorch's meta kernel makes, and the counted step is the same op for op with the
    shortcut off (batch norm, layer norm with permuted inputs, activations, sums)."""
    from torch.utils._pytree import tree_flatten

    from scalelab import metashapes

    made, differ = [], []

    def layout(out):
        leaves, _ = tree_flatten(out if isinstance(out, tuple) else (out,))
        return [None if t is None else (tuple(t.shape), t.stride(), t.dtype) for t in leaves]

    def checked(func, args, kwargs):
        mine = from_shapes(func, args, kwargs)
        if mine is not None:
            made.append(str(func))
            if layout(mine) != layout(func(*args, **kwargs)):
                differ.append(str(func))
        return mine

    spec = (WorkloadSpec(model, input_shape=shape, num_classes=10), 2)
    from_shapes = metashapes.shaped
    monkeypatch.setattr(metashapes, "shaped", checked)
    fast = opcount._trace.__wrapped__(*spec)
    monkeypatch.setattr(metashapes, "shaped", lambda *a: None)
    slow = opcount._trace.__wrapped__(*spec)
    assert made and not differ, differ
    assert fast == slow


def test_every_operation_made_from_shapes_is_found_in_this_torch():
    from scalelab import metashapes

    assert len(metashapes._SHAPED) == len(metashapes._MAKERS) == 14


def test_mismatched_normalization_is_left_to_pytorch():
    """A per-channel tensor of the wrong size, or a normalized shape the input does not end
    in, is not made from shapes: PyTorch's kernel runs and raises."""
    import torch

    from scalelab.metashapes import shaped

    aten = torch.ops.aten
    x = torch.empty(2, 8, 4, 4, device="meta")
    six, eight = torch.empty(6, device="meta"), torch.empty(8, device="meta")
    bn = aten.native_batch_norm.default
    assert shaped(bn, (x, eight, eight, eight, eight, True, 0.1, 1e-5), {}) is not None
    assert shaped(bn, (x, six, six, six, six, True, 0.1, 1e-5), {}) is None
    y = torch.empty(2, 5, 7, device="meta")
    ln = aten.native_layer_norm.default
    assert shaped(ln, (y, [7], torch.empty(7, device="meta"), None, 1e-5), {}) is not None
    assert shaped(ln, (y, [6], None, None, 1e-5), {}) is None
    with pytest.raises(RuntimeError):
        torch.nn.functional.layer_norm(y, [6])


def test_bytes_are_counted_over_the_leaves_pytree_finds():
    from torch.utils._pytree import tree_flatten

    from scalelab.opcount import _nbytes

    with torch.device("meta"):
        a, b, c = torch.empty(2, 3), torch.empty(4, 5, 6), torch.empty(7)
        top = torch.topk(torch.empty(3, 8), 2)  # a torch.return_types result
    for x in [a, (a, [b, None, 3], {"out": c}), ([a, b], {"x": [c, (a,)]}, 1.5, "s"), top,
              ((), [], {}), (torch.Size([2, 3]), torch.float32, a)]:
        leaves, _ = tree_flatten(x)
        assert _nbytes(x) == sum(t.numel() * 4 for t in leaves if isinstance(t, torch.Tensor))
    assert _nbytes((a, [b], {"k": c})) == 4 * (6 + 120 + 7)
