"""The outputs of a few ATen operations on meta tensors, made from their inputs' shapes.

On the meta device PyTorch runs batch and layer normalization, their backward and several
activations' backward through Python decompositions of the whole computation (every
intermediate tensor of the arithmetic is made and checked), which is most of the time an
operation count takes: 0.52 s of ResNet-50's 0.79 s per traced step, 1.19 s of
DenseNet-121's 2.13 s. Their outputs are shaped like their inputs, so :func:`shaped` makes
them directly (an empty tensor like the input, or the per-channel statistics), with the
same shapes, strides and dtypes the decompositions give; ``tests/test_opcount.py`` holds
every output here against PyTorch's own on the traced models.

Only meta tensors of one floating dtype, in the layouts these operations are given in a
training step, are made here; anything else returns ``None`` and runs through PyTorch.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _meta(*tensors) -> bool:
    """Every tensor given is a meta tensor of the first one's dtype (``None`` allowed)."""
    real = [t for t in tensors if t is not None]
    return all(isinstance(t, torch.Tensor) and t.is_meta and t.dtype == real[0].dtype
               for t in real)


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.stride() == b.stride()


def _per_channel(x: torch.Tensor, *stats) -> bool:
    """Every per-channel tensor given has one value per channel of ``x``."""
    return all(t is None or tuple(t.shape) == (x.shape[1],) for t in stats)


def _normalized(x: torch.Tensor, normalized_shape, *affine) -> bool:
    """``x`` ends in ``normalized_shape`` and so do the weight and bias given."""
    shape = tuple(normalized_shape)
    return 0 < len(shape) <= x.dim() and tuple(x.shape[x.dim() - len(shape):]) == shape \
        and all(t is None or tuple(t.shape) == shape for t in affine)


def _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if not _meta(x, weight, bias, running_mean, running_var) or x.dim() < 2 \
            or not _per_channel(x, weight, bias, running_mean, running_var):
        return None  # PyTorch's kernel says what is wrong
    stats = (x.shape[1],) if training else (0,)
    return torch.empty_like(x), x.new_empty(stats), x.new_empty(stats)


def _batch_norm_backward(grad_out, x, weight, running_mean, running_var, save_mean,
                         save_invstd, train, eps, output_mask):
    if not _meta(grad_out, x, weight) or not _same_layout(grad_out, x) or x.dim() < 2 \
            or not _per_channel(x, weight):
        return None
    # the weight's and the bias's gradients: one value per channel
    return (torch.empty_like(x) if output_mask[0] else None,
            *(x.new_empty((x.shape[1],)) if m else None for m in output_mask[1:3]))


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    if not _meta(x, weight, bias) or not _normalized(x, normalized_shape, weight, bias):
        return None
    axis = x.dim() - len(normalized_shape)
    stats = (*x.shape[:axis], *([1] * len(normalized_shape)))
    return x.new_empty(x.shape), x.new_empty(stats), x.new_empty(stats)


def _layer_norm_backward(grad_out, x, normalized_shape, mean, rstd, weight, bias,
                         output_mask):
    if not _meta(grad_out, x, weight, bias) or not _same_layout(grad_out, x) \
            or not _normalized(x, normalized_shape, weight, bias):
        return None
    return (x.new_empty(x.shape) if output_mask[0] else None,
            torch.empty_like(weight) if output_mask[1] and weight is not None else None,
            torch.empty_like(bias) if output_mask[2] and bias is not None else None)


def _pointwise_backward(grad_out, x, *_scalars, **_kwargs):
    """An activation's backward: the gradient has the shape and layout of the output's."""
    if not _meta(grad_out, x) or not _same_layout(grad_out, x):
        return None
    return torch.empty_like(grad_out)


def _pointwise(x, *_scalars, **_kwargs):
    return torch.empty_like(x) if _meta(x) else None


def _pointwise_(x, *_scalars, **_kwargs):
    """An in-place activation returns its input."""
    return x if _meta(x) else None


def _add(a, b, *, alpha=1):
    """The sum of two tensors of one shape, layout and dtype (gradients accumulated where
    a tensor is used twice, residual connections)."""
    if not isinstance(b, torch.Tensor) or not _meta(a, b) or not _same_layout(a, b):
        return None
    return torch.empty_like(a)


_MAKERS = {
    "native_batch_norm.default": _batch_norm,
    "native_batch_norm_backward.default": _batch_norm_backward,
    "native_layer_norm.default": _layer_norm,
    "native_layer_norm_backward.default": _layer_norm_backward,
    "threshold_backward.default": _pointwise_backward,
    "hardtanh_backward.default": _pointwise_backward,
    "gelu_backward.default": _pointwise_backward,
    "sigmoid_backward.default": _pointwise_backward,
    "hardswish_backward.default": _pointwise_backward,
    "hardsigmoid_backward.default": _pointwise_backward,
    "gelu.default": _pointwise,
    "hardsigmoid.default": _pointwise,
    "hardswish_.default": _pointwise_,
    "add.Tensor": _add,
}


def _overload(name: str):
    packet, _, overload = name.partition(".")
    return getattr(getattr(aten, packet, None), overload, None)


# an operation this torch does not have is left to PyTorch
_SHAPED = {op: make for name, make in _MAKERS.items() if (op := _overload(name)) is not None}


def shaped(func, args: tuple, kwargs: dict):
    """``func(*args, **kwargs)``'s outputs, made from the inputs' shapes, for the operations
    in this module on meta tensors; ``None`` where PyTorch must run it."""
    make = _SHAPED.get(func)
    if make is None:
        return None
    try:
        return make(*args, **kwargs)
    except TypeError:  # another signature than the one this module knows: PyTorch's
        return None


def run(func, args: tuple, kwargs: dict):
    """``func(*args, **kwargs)``: made from shapes where :func:`shaped` can, by PyTorch
    otherwise."""
    out = shaped(func, args, kwargs)
    return func(*args, **kwargs) if out is None else out


class ShapedMeta(TorchDispatchMode):
    """Runs every operation through :func:`run`: a forward pass on meta tensors in a
    fraction of the time, with the same tensors."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return run(func, args, kwargs or {})
