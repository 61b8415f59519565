"""Per-operation cost of one training step: FLOPs and bytes moved, counted on meta tensors.

A model is built on the meta device (shapes only, no weights, no memory) and one training
step (forward, loss, backward) runs under a ``TorchDispatchMode`` that sees every ATen
operation. For each operation:

- FLOPs: from ``torch.utils.flop_counter``'s formula registry (matrix products, convolutions
  and attention; the counts ``FlopCounterMode`` gives), except a convolution's backward,
  counted as one forward convolution per gradient it computes (the registry's formula
  overcounts grouped convolutions). Other operations (batch norm,
  activations, additions, pooling, losses) have no entry there and count 0 FLOPs: on a GPU
  they are bound by memory, which is what their bytes describe.
- bytes: the sizes of the tensor inputs plus the tensor outputs, at fp32 (the meta tensors'
  dtype). An operation that only makes a view (``view``, ``t``, ``expand`` ...) moves
  nothing and is left out, as is anything with neither FLOPs nor bytes.
- ``tensor_core``: True for the matrix products and convolutions, the operations a TF32,
  FP16 or BF16 tensor-core path runs; the roofline uses that precision's peak for them and
  the FP32 peak for the rest.
- Attention: on a GPU, ``scaled_dot_product_attention`` runs as one fused kernel (flash
  attention in fp16/bf16, memory-efficient attention in fp32, both on sm80 and later; the
  order PyTorch's SDPA dispatcher tries), which never writes the score matrix to memory.
  On meta tensors the dispatcher would pick the math path (two batched products, a
  softmax, their backward: every score read and written), so the trace runs the
  memory-efficient kernel's ATen operation and its backward instead
  (:func:`_fused_attention`): their FLOPs are the registry's, their bytes Q, K, V, the
  output and their gradients.
- Allocations (``empty``, ``new_empty_strided`` ...) launch no kernel and move no bytes:
  left out.

The optimizer step is not run (its cost does not depend on the data): SGD with momentum
reads the parameter, its gradient and the momentum buffer and writes the buffer and the
parameter (5 x parameter bytes, 3 FLOPs per element); Adam reads parameter, gradient and two
moments and writes three (7 x parameter bytes, about 10 FLOPs per element). PyTorch's default
``foreach`` implementation launches one kernel per group of up to 110 tensors for each of
its few element-wise passes, so it is one entry with that kernel count.

Batch and layer normalization, their backward and a few activations' outputs are made from
their inputs' shapes (:mod:`scalelab.metashapes`), not by PyTorch's meta decompositions of
the arithmetic: the same tensors, op for op, in a third of the time (19 torchvision models,
SGD and Adam, batches 2, 4 and 64: 68.7 s counted before, 22.6 s after, every list equal).

:func:`describe` gives the model's parameter count, each parameter tensor's bytes and the
FLOPs per sample of its step counted this way (:class:`scalelab.workload.WorkloadInfo`).

Only batches 2 and 4 are traced; a larger batch's costs are derived from them, each op's
FLOPs and bytes being affine in the batch (exact when both traces have the same operations,
which is checked; otherwise that batch is traced too). Results are cached per (model, input
shape, classes, optimizer, batch) and are deterministic: the same spec gives the same list,
in execution order.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import conv_flop_count, flop_registry

from scalelab import metashapes
from scalelab.errors import UsageError
from scalelab.meta_build import meta_model
from scalelab.opclasses import op_class
from scalelab.oprecord import PHASES, OpCost, StepOps  # noqa: F401 - re-exported
from scalelab.workload import WorkloadInfo, WorkloadSpec, logits_of

_FOREACH_TENSORS_PER_KERNEL = 110  # torch's multi_tensor_apply depth-1 list size
_OPTIMIZER_PASSES = {"sgd": 3, "adam": 5}  # element-wise foreach passes per step
_OPTIMIZER_BYTES = {"sgd": 5, "adam": 7}  # parameter-sized tensors read + written
_OPTIMIZER_FLOPS = {"sgd": 3, "adam": 10}  # per parameter element

_TENSOR_CORE_OPS = {"mm", "addmm", "bmm", "baddbmm", "convolution", "convolution_backward",
                    "_convolution", "cudnn_convolution", "_scaled_dot_product_efficient_attention",
                    "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention",
                    "_scaled_dot_product_efficient_attention_backward",
                    "_scaled_dot_product_flash_attention_backward"}
_CAST_MODULES = (torch.nn.modules.conv._ConvNd, torch.nn.Linear, torch.nn.MultiheadAttention)
_ALLOC_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
_VIEW_OPS = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "detach", "alias",
             "as_strided", "slice", "select", "unsqueeze", "squeeze", "reshape", "_reshape_alias",
             "split", "split_with_sizes", "unbind", "chunk", "narrow", "lift_fresh", "unfold"}


def _conv_backward_flops(grad_out, x, w, _bias, _stride, _padding, _dilation, transposed,
                         _output_padding, _groups, output_mask, *_rest) -> float:
    """Backward of a convolution: its gradient with respect to the input and to the weight
    each cost one forward convolution's multiply-adds.

    Counted here rather than with ``torch.utils.flop_counter``'s formula, which computes the
    weight gradient as a convolution over all input channels and so overcounts a grouped
    convolution by its group count (a depthwise convolution by its channel count).
    """
    fwd = conv_flop_count(list(x.shape), list(w.shape), list(grad_out.shape), transposed)
    return float(fwd * (int(bool(output_mask[0])) + int(bool(output_mask[1]))))


def _nbytes(x) -> int:
    """fp32 bytes of the tensors in ``x``, an operation's arguments or results: tensors
    inside tuples (results such as ``torch.return_types`` too), lists and dicts. The same
    leaves as ``torch.utils._pytree.tree_flatten``, in 0.3 of its time (a convolution's
    arguments and result: 17 us against 58)."""
    if isinstance(x, torch.Tensor):
        return x.numel() * 4
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(v) for v in x)
    if isinstance(x, dict):
        return sum(_nbytes(v) for v in x.values())
    return 0


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.phase = "forward"
        self.ops: list[OpCost] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = metashapes.run(func, args, kwargs)
        packet = func._overloadpacket
        name = packet.__name__
        if name in _VIEW_OPS or name in _ALLOC_OPS:
            return out
        flops = 0.0
        formula = flop_registry.get(packet)
        if name == "convolution_backward":
            flops = _conv_backward_flops(*args)
        elif formula is not None:
            flops = float(formula(*args, **kwargs, out_val=out))
        nbytes = _nbytes(args) + _nbytes(kwargs) + _nbytes(out)
        if flops or nbytes:
            self.ops.append(OpCost(name, self.phase, flops, float(nbytes),
                                   name in _TENSOR_CORE_OPS, 1, op_class(name, args)))
        return out


def _fused_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                scale=None, enable_gqa=False):
    """``scaled_dot_product_attention`` as the fused kernel a GPU runs (see the module):
    ``aten._scaled_dot_product_efficient_attention``, whose meta kernel and backward the
    dispatch recorder then sees. A boolean mask or grouped-query attention goes to
    PyTorch's own function (the memory-efficient kernel takes neither as such)."""
    if enable_gqa or (attn_mask is not None and attn_mask.dtype == torch.bool):
        return _SDPA(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                     is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, attn_mask, True, float(dropout_p), bool(is_causal),
        scale=scale)[0]


_SDPA = torch.nn.functional.scaled_dot_product_attention


@contextmanager
def _fused_attention():
    """``torch.nn.functional.scaled_dot_product_attention`` is :func:`_fused_sdpa` inside
    (``nn.MultiheadAttention`` reaches it through that name), PyTorch's own again after."""
    torch.nn.functional.scaled_dot_product_attention = _fused_sdpa
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = _SDPA


def _optimizer_op(spec: WorkloadSpec, params: list[torch.Tensor]) -> OpCost:
    n = sum(p.numel() for p in params)
    groups = -(-len(params) // _FOREACH_TENSORS_PER_KERNEL)
    return OpCost(f"optimizer.{spec.optimizer}", "optimizer",
                  float(_OPTIMIZER_FLOPS[spec.optimizer] * n),
                  float(_OPTIMIZER_BYTES[spec.optimizer] * n * 4), False,
                  kernels=_OPTIMIZER_PASSES[spec.optimizer] * groups, op_class="optimizer")


def record_step(spec: WorkloadSpec, net: torch.nn.Module, x: torch.Tensor,
                y: torch.Tensor) -> tuple[OpCost, ...]:
    """The forward and backward operations of one step of ``net`` on ``(x, y)``, counted
    as this module counts them, on whatever device the tensors are (meta or CPU)."""
    net.train()
    rec = _Recorder()
    with rec:
        loss = spec.loss_fn()(logits_of(net(x)), y)
        rec.phase = "backward"
        loss.backward()
    return tuple(rec.ops)


@lru_cache(maxsize=64)
def _trace(spec: WorkloadSpec, batch_size: int) -> StepOps:
    """One traced step; ``spec`` (hashable) keys the cache whole, so a language model's
    reduced copy or a factory taking token ids is not another model's trace."""
    model, input_shape, num_classes, optimizer = (spec.model, spec.input_shape,
                                                  spec.num_classes, spec.optimizer)
    net = meta_model(spec)
    with torch.device("meta"):
        x = spec.example_input(batch_size, "meta", empty=True)
        y = spec.example_target(batch_size, "meta")
    params = [p for p in net.parameters() if p.requires_grad]
    with _fused_attention():
        step = record_step(spec, net, x, y)
    ops = (*step, _optimizer_op(spec, params))
    casts = sum(1 for m in net.modules() if isinstance(m, _CAST_MODULES)
                for p in m.parameters(recurse=False) if p.requires_grad)
    return StepOps(model, tuple(input_shape), num_classes, optimizer, batch_size,
                   sum(p.numel() for p in params), ops, casts)


_SMALL = (2, 4)  # batches traced; larger ones are derived from these two


def _affine(small: StepOps, large: StepOps, batch: int) -> StepOps | None:
    """Each op's FLOPs and bytes at ``batch`` from two traced batches, when both traces
    have the same operations in the same order: every cost is affine in the batch (inputs
    and outputs grow with it, weights do not), so two points determine it exactly."""
    if len(small.ops) != len(large.ops):
        return None
    b0, b1 = small.batch_size, large.batch_size
    ops = []
    for o0, o1 in zip(small.ops, large.ops):
        if (o0.name, o0.phase, o0.tensor_core, o0.kernels, o0.op_class) != \
                (o1.name, o1.phase, o1.tensor_core, o1.kernels, o1.op_class):
            return None
        k = (batch - b0) / (b1 - b0)
        ops.append(OpCost(o0.name, o0.phase, o0.flops + k * (o1.flops - o0.flops),
                          o0.bytes_fp32 + k * (o1.bytes_fp32 - o0.bytes_fp32),
                          o0.tensor_core, o0.kernels, o0.op_class))
    return StepOps(small.model, small.input_shape, small.num_classes, small.optimizer, batch,
                   small.param_count, tuple(ops), small.cast_weights)


@lru_cache(maxsize=256)
def _count(spec: WorkloadSpec, batch_size: int) -> StepOps:
    if batch_size in _SMALL:
        return _trace(spec, batch_size)
    traced = [_trace(spec, b) for b in _SMALL]
    derived = _affine(*traced, batch_size)
    if derived is None:  # the operations change with the batch: trace this one
        return _trace(spec, batch_size)
    return derived


def step_ops(spec: WorkloadSpec | str, batch_size: int) -> StepOps:
    """The operations of one training step of ``spec`` at ``batch_size`` (cached).

    ``spec`` is a :class:`WorkloadSpec` or a model name (ImageNet defaults). A model that
    cannot run on meta tensors raises ``ValueError`` naming it.
    """
    if isinstance(spec, str):
        spec = WorkloadSpec(model=spec)
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size}")
    if batch_size < 2:
        raise ValueError("batch_size must be >= 2: batch normalization in training needs "
                         "more than one value per channel")
    try:
        return _count(spec, int(batch_size))
    except (ValueError, TypeError):
        raise
    except Exception as e:  # noqa: BLE001 - a model that meta tensors cannot run
        raise ValueError(f"model {spec.model!r}: cannot count its operations on meta "
                         f"tensors: {e}") from None


def count_flops_per_sample(spec: WorkloadSpec, model: torch.nn.Module, device: str) -> float:
    """Forward+backward FLOPs per sample at batch 2, counted by the project's operation
    count (:func:`record_step`: multiply-adds of convolutions, matrix
    products and attention, a convolution's backward as one forward convolution per
    gradient it computes).

    Not ``FlopCounterMode``'s total: its formula for a convolution's weight gradient
    overcounts a grouped convolution by its group count (mobilenet_v2: 12.3 GFLOP per sample
    where the step does 1.8). Batch 2, not 1, because batch normalization refuses one value
    per channel in training mode; every count is linear in the batch, so it is halved.
    """
    batch = 2
    x = spec.example_input(batch, device)
    y = spec.example_target(batch, device)
    if not spec.tokens:
        x = torch.randn(x.shape, device=device)
    return sum(o.flops for o in record_step(spec, model, x, y)) / batch


def describe(spec: WorkloadSpec, flops: bool = True) -> WorkloadInfo:
    """Parameter count, bytes per tensor and FLOPs per sample of ``spec``'s model.

    The model is built on the meta device (no memory is allocated) and FLOPs are counted
    there; a model that cannot run on meta tensors is counted on CPU instead.
    """
    try:
        model = meta_model(spec)
        device = "meta"
    except UsageError:
        raise
    except Exception:  # noqa: BLE001 - the model cannot be built on meta: use the CPU
        model = spec.build_model(seed=None)
        device = "cpu"
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    tensor_bytes = [p.numel() * p.element_size() for _, p in params]
    flops_value = 0.0
    if flops:
        try:
            flops_value = count_flops_per_sample(spec, model, device)
        except Exception as e:  # noqa: BLE001
            if device == "cpu":
                raise UsageError(
                    f"model {spec.model!r} cannot run a training step on input "
                    f"{','.join(map(str, spec.input_shape))}: {e}"
                ) from None
            try:
                flops_value = count_flops_per_sample(spec, spec.build_model(seed=None), "cpu")
            except Exception as e2:  # noqa: BLE001
                raise UsageError(
                    f"model {spec.model!r} cannot run a training step on input "
                    f"{','.join(map(str, spec.input_shape))}: {e2}"
                ) from None
    return WorkloadInfo(
        param_count=sum(p.numel() for _, p in params),
        param_bytes=sum(tensor_bytes),
        tensor_bytes=tensor_bytes,
        tensor_names=[n for n, _ in params],
        flops_per_sample=float(flops_value),
    )
