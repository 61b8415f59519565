"""Operation classes of a training step and the operations autocast keeps in fp32.

Kernels of one class reach similar fractions of a device's peaks (the roofline scales a
device's fractions per class, :mod:`scalelab.theory.roofline`). Nothing here imports torch:
the fit reads counted operations without it.
"""

from __future__ import annotations

# Operation classes: kernels of one class reach similar fractions of a device's peaks.
OP_CLASSES = ("conv", "conv_grouped", "matmul", "attention", "norm", "elementwise", "pool",
              "optimizer", "conv_nchw")
"""``conv_nchw``: a dense convolution on fp16/bf16 tensor cores with NCHW tensors (the
model not in channels_last), which cuDNN runs slower than the same convolution in NHWC;
never counted as such, the roofline gives a dense convolution this class
(:func:`scalelab.hardware.curve.roofline_ops`)."""
_CONV_OPS = {"convolution", "convolution_backward", "_convolution", "cudnn_convolution"}
_MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear"}
_NORM_PREFIXES = ("native_batch_norm", "_native_batch_norm", "cudnn_batch_norm",
                  "miopen_batch_norm", "native_layer_norm", "native_group_norm", "batch_norm")
_POOL_WORDS = ("pool",)

# ops autocast runs in fp32 (torch.amp's fp32 list, as they appear in ATen)
AUTOCAST_FP32_OPS = {"native_layer_norm", "native_group_norm", "_softmax", "_log_softmax",
                     "nll_loss_forward", "nll_loss2d_forward", "mse_loss", "binary_cross_entropy",
                     "binary_cross_entropy_with_logits", "smooth_l1_loss", "kl_div"}


def op_class(name: str, args: tuple = ()) -> str:
    """The class of ATen operation ``name`` (``args``: its arguments, for a convolution's
    groups): dense or grouped convolution, matrix product, attention, normalization,
    pooling, else element-wise (activations, additions, reductions, losses, copies)."""
    if name in _CONV_OPS:
        groups = args[9] if name == "convolution_backward" and len(args) > 9 else \
            args[8] if len(args) > 8 else 1
        return "conv_grouped" if isinstance(groups, int) and groups > 1 else "conv"
    if name in _MATMUL_OPS:
        return "matmul"
    if "scaled_dot_product" in name:
        return "attention"
    if name.startswith(_NORM_PREFIXES):
        return "norm"
    if any(w in name for w in _POOL_WORDS):
        return "pool"
    return "elementwise"
