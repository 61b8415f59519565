"""Operation classes: each op at the precision the configuration gives it, and class
factors on the device's fractions fitted beyond ResNet-50."""

from __future__ import annotations

import pytest

from scalelab import hardware
from scalelab.hardware.fit import fit, roofline_ops
from scalelab.hardware.reference import reference
from scalelab.opclasses import AUTOCAST_FP32_OPS, OP_CLASSES, op_class
from scalelab.opcount import step_ops
from scalelab.theory.roofline import RooflineOp, roofline_step


def _classes(model):
    return {o.op_class for o in step_ops(model, 4).ops}


def test_depthwise_convolutions_are_their_own_class():
    mob = step_ops("mobilenet_v2", 4)
    assert any(o.op_class == "conv_grouped" for o in mob.ops)
    grouped = [o for o in mob.ops if o.op_class == "conv_grouped"]
    # 17 depthwise convolutions: forward and backward each
    assert len([o for o in grouped if o.phase == "forward"]) == 17
    assert len([o for o in grouped if o.phase == "backward"]) == 17
    assert "conv_grouped" not in _classes("resnet18")
    assert {"conv", "norm", "pool", "elementwise", "matmul", "optimizer"} <= _classes("resnet18")
    assert {"matmul", "norm"} <= _classes("vit_b_16")
    assert op_class("convolution", (None, None, None, 1, 0, 1, False, 0, 32)) == "conv_grouped"
    assert op_class("_scaled_dot_product_flash_attention") == "attention"
    assert op_class("native_layer_norm") == "norm" and op_class("relu_") == "elementwise"
    assert set(OP_CLASSES) >= {o.op_class for o in step_ops("vit_b_16", 4).ops}


def test_each_op_at_the_precision_the_configuration_gives_it():
    h200 = hardware.device("H200")
    vit = step_ops("vit_b_16", 4)
    fp32 = roofline_ops(vit, h200, "fp32")
    tf32 = roofline_ops(vit, h200, "tf32")
    bf16 = roofline_ops(vit, h200, "bf16")
    classes = {o.op_class for o in vit.ops}
    assert {"matmul", "conv", "elementwise"} <= classes  # the loop below checks each
    for o, a, b, c in zip(vit.ops, fp32, tf32, bf16):
        if o.op_class == "matmul":  # FP32 by default, TF32 only when asked, bf16 in autocast
            assert (a.peak_flops, b.peak_flops, c.peak_flops) == (67e12, 494.5e12, 989.5e12)
        if o.op_class == "conv":  # cuDNN's TF32 by default
            assert a.peak_flops == 494.5e12
        if o.name in AUTOCAST_FP32_OPS or o.phase == "optimizer":  # autocast keeps fp32
            assert c.nbytes == a.nbytes
        elif o.op_class in ("matmul", "elementwise"):
            assert c.nbytes == pytest.approx(a.nbytes / 2)
    assert any(o.name == "native_layer_norm" for o in vit.ops)
    mob = step_ops("mobilenet_v2", 4)
    assert any(o.op_class == "conv_grouped" for o in mob.ops)
    for o, r in zip(mob.ops, roofline_ops(mob, h200, "bf16")):
        if o.op_class == "conv_grouped":  # depthwise kernels do not run on tensor cores
            assert r.peak_flops == 67e12


def test_class_factors_scale_the_fractions_capped_at_one():
    ops = [RooflineOp(1e12, 1e6, 100e12, 1, "matmul"), RooflineOp(0.0, 1e9, 100e12, 1, "norm")]
    plain = roofline_step(ops, 1e12, 0.5, 0.5)
    scaled = roofline_step(ops, 1e12, 0.5, 0.5, class_factors={"matmul": (1.5, 1.0),
                                                                 "norm": (1.0, 4.0)})
    assert plain.step_s == pytest.approx(1e12 / 50e12 + 1e9 / 0.5e12)
    assert scaled.step_s == pytest.approx(1e12 / 75e12 + 1e9 / 1e12)  # e_m x 4 capped at 1


def test_fit_beyond_resnet50_has_half_precision_class_factors():
    pts = reference().points
    models = {p.model for p in pts}
    assert len(models) >= 20 and any(p.device == "RTX-3090" for p in pts)
    f = fit()
    half = f.class_factors("RTX-3090", "fp16")
    assert half and all(c in OP_CLASSES for c in half)
    assert "attention" not in half  # no point runs attention kernels: its factor stays 1
    assert f.class_factors("V100-SXM2-16GB", "fp32") == {}
    assert fit(classes=False).factors == {}


def test_fp32_unit_operations_take_the_fp32_units_fraction():
    """In PyTorch's default fp32 on an H200 the matrix products run on the FP32 units while
    the convolutions use TF32 tensor cores: the products take the device's fraction on FP32
    units (borrowed from the GPUs fitted there), not the TF32 class's."""
    h200 = hardware.device("H200")
    vit = step_ops("vit_b_16", 4)
    fp32, tf32 = roofline_ops(vit, h200, "fp32"), roofline_ops(vit, h200, "tf32")
    assert {r.units for o, r in zip(vit.ops, fp32) if o.op_class == "matmul"} == {"cuda-core"}
    assert all(r.units == "" for r in tf32 if r.op_class == "matmul")
    assert all(r.units == "" for r in fp32 if r.op_class == "conv")
    v100 = hardware.device("V100-SXM2-16GB")  # all on FP32 units: nothing "other"
    assert all(r.units == "" for r in roofline_ops(vit, v100, "fp32"))
    f = fit()
    e_u = f.unit_fraction("H200", "fp32")
    assert e_u == f.class_fractions("H200", "cuda-core").e_c != f.fractions("H200", "fp32").e_c
    assert f.unit_fraction("V100-SXM2-16GB", "fp32") == 1.0
    from scalelab.hardware.estimate import estimate_step

    how = estimate_step(vit, "H200", "fp32", f=f).how
    assert f"FP32-unit ops at {e_u:.2f} of the FP32 peak" in how
    assert "FP32-unit" not in estimate_step(vit, "V100-SXM2-16GB", "fp32", f=f).how
    ops = [RooflineOp(1e12, 1e6, 67e12, 1, "matmul", "cuda-core")]
    step = roofline_step(ops, 4.8e12, 0.3, 0.3, unit_e_c={"cuda-core": 0.75})
    assert step.step_s == pytest.approx(1e12 / (67e12 * 0.75))
    with pytest.raises(ValueError, match="units"):
        roofline_step(ops, 4.8e12, 0.3, 0.3)
