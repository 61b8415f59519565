"""Compute time of a transformer's layers on a target GPU, from the operations they issue.

Per layer and micro-batch, on one tensor-parallel rank (width / t), the operations a block
issues and the time each takes on the device (the roofline of
:mod:`scalelab.theory.roofline`, with fractions of the dense peak fitted per class):

- **matrix products** (q k v, the output projection, the MLP's two or three): a product of
  an M x K by a K x N matrix is ``2 M K N`` FLOPs; backward runs two of the same size (the
  input's gradient M x K, the weight's K x N). Wave quantization: cuBLAS tiles the output
  in ``TILE x TILE`` blocks, one per multiprocessor at a time, so a product whose tiles do
  not fill the last wave runs as if they did: FLOPs x ``ceil(tiles / SMs) SMs / tiles``
  (NVIDIA, "Matrix Multiplication Background User's Guide", wave quantization) where the
  device's multiprocessor count is known;
- **attention's core**: fused (FlashAttention, SDPA's flash kernel) ``4 b s^2 h`` FLOPs
  forward, halved by the causal mask, backward 2.5 x (five products, one recomputing the
  scores); unfused (Megatron's softmax kernel): two products of ``2 b s^2 h`` each way with
  the full square computed, and the softmax memory-bound over ``b a s^2`` values;
- **norms, element-wise** (residual adds, GELU or SwiGLU, rotary): memory-bound, their
  bytes read and written;
- the **embedding** (a gather), the **vocabulary head** (a product M x h x V / t) and its
  cross-entropy (memory-bound over the fp32 logits), and the **optimizer** (AdamW:
  memory-bound, 28 bytes per fp32 parameter of the rank's shard: p, g, m, v read, p, m, v
  written);
- a fixed time per layer and pass (forward, backward x 2, recomputation): the kernels'
  launches and gaps the roofline does not explain, on the host's side (``layer_s``) and
  on the device's (``pass_s``), both fitted;
- Megatron's softmax falls back from its fused kernel to five PyTorch kernels in fp32
  where the kernel's shape conditions fail (:func:`megatron_softmax`), and its loss is
  computed on fp32 logits (:data:`MEGATRON_LOSS_BYTES`).

Everything here is cached per (model, sequence, micro-batch, device, ...): the search calls
it once per distinct shape, not once per layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from scalelab import hardware
from scalelab.hardware.lm_fit import Efficiency

TILE = 128
#: multiprocessors per device, for wave quantization (the architecture whitepapers:
#: NVIDIA A100 Tensor Core GPU Architecture, 108 SMs; NVIDIA H100 Tensor Core GPU
#: Architecture, H100 SXM5 132 SMs, H100 PCIe 114; the H200 is the H100 SXM5's GH100 with
#: more memory, 132). Devices not named here get no wave quantization.
SMS = {"A100-SXM-40GB": 108, "A100-SXM-80GB": 108, "A100-PCIE-40GB": 108,
       "A100-PCIE-80GB": 108, "H100-SXM": 132, "H100-PCIE": 114, "H200": 132}


Work = tuple[float, float, float, float]
"""Seconds at full efficiency by class: (matrix products at the tensor peak, fused
attention at the same peak, memory-bound bytes at the memory bandwidth) and the layer
passes the host issues. The device's time is ``Work[:3] . (1/e_matmul, 1/e_attention,
1/e_memory)``, the host's ``Work[3] x layer_s``; the work takes the longer of the two (the
device cannot run what the host has not issued: :func:`scalelab.theory.roofline.
step_with_host_s`). Each side is linear in its factors, so a fit is least squares once each
row's side is known (:mod:`scalelab.plan.lm.fit`)."""


def device_s(work: Work, eff: Efficiency) -> float:
    """The device's seconds for ``work`` at ``eff``'s fractions, plus ``eff.pass_s`` per
    layer pass: the device's own fixed time for a pass's kernels beyond their roofline
    (each kernel's start and drain on the device, a part-filled GPU at the tails of its
    waves, and, under FSDP, the compute stream's wait on each block's gathered
    parameters), which the host issuing ahead does not hide. Fitted: in vTrain's rows a
    layer's time is a fixed ~2 ms plus a per-sequence cost wherever it exceeds the host's
    (../shared/data/lm/README.md's data), in llm-foundry's the small models' steps."""
    return (work[0] / eff.matmul + work[1] / eff.attention + work[2] / eff.memory
            + work[3] * eff.pass_s)


def host_s(work: Work, eff: Efficiency) -> float:
    """The host's seconds to issue ``work``'s layer passes."""
    return work[3] * eff.layer_s


def add(*works: Work) -> Work:
    a = b = c = d = 0.0
    for w in works:
        a, b, c, d = a + w[0], b + w[1], c + w[2], d + w[3]
    return (a, b, c, d)


def scale(k: float, w: Work) -> Work:
    return (k * w[0], k * w[1], k * w[2], k * w[3])


@dataclass(frozen=True)
class LayerWork:
    """One layer on one tensor rank, one micro-batch, by pass."""

    forward: Work
    backward: Work
    attention_forward: Work  # the attention core (what selective recomputation reruns)
    flops_forward: float     # FLOPs of one forward


@dataclass(frozen=True)
class EndWork:
    """The parts outside the blocks, one micro-batch: the embedding (stage 0), the head
    and the loss (last stage), forward + backward each."""

    embedding: Work
    head: Work


def value_bytes(precision: str) -> float:
    """Bytes of an activation value: 4 in fp32/tf32, 2 in bf16/fp16 (and under fp8
    linears, whose outputs stay bf16)."""
    return 4.0 if precision in ("fp32", "tf32") else 2.0


@lru_cache(maxsize=256)
def peak_flops(device: str, precision: str) -> float:
    """The device's dense peak for the matrix products at ``precision`` (fp8: Float8
    linears, torchao's, on the FP8 tensor cores; attention stays in bf16)."""
    peak = hardware.device(device).peak_flops(precision)
    if peak is None:
        raise ValueError(f"{device} has no {precision} peak in the catalog")
    return peak


def _attention_precision(precision: str) -> str:
    return "bf16" if precision == "fp8" else precision


#: output tiles cuBLAS chooses among, with the time a smaller tile costs per FLOP relative
#: to 128 x 128 (less reuse per load; round figures, the fit scales them all)
TILES = ((128, 128, 1.0), (128, 64, 1.25), (64, 64, 1.8))


def _wave(m: float, n: float, sms: int | None) -> float:
    """Wave- and tile-quantization factor >= 1 of an m x n output (module docstring): the
    best of :data:`TILES`, as cuBLAS's heuristics pick a smaller tile where a large one
    leaves multiprocessors idle."""
    if not sms:
        return 1.0
    best = math.inf
    for a, b, cost in TILES:
        tm, tn = math.ceil(m / a), math.ceil(n / b)
        tiles = tm * tn
        waves = math.ceil(tiles / sms)
        best = min(best, cost * waves * sms * a * b / (m * n))
    return max(1.0, best)


def _matmul(m: float, k: float, n: float, peak: float, sms: int | None
            ) -> tuple[float, float]:
    """(forward, backward) seconds at the peak of an m x k by k x n product and its two
    gradients (the input's m x k, the weight's k x n)."""
    f = 2.0 * m * k * n / peak
    return f * _wave(m, n, sms), f * (_wave(m, k, sms) + _wave(k, n, sms))


def _layer_products(cfg, tp: int) -> list[tuple[int, int]]:
    """(K, N) of each product of a block on one tensor rank, M being the tokens."""
    h, f, kv = cfg.hidden, cfg.ffn, cfg.kv_dim
    prods = [(h, (h + 2 * kv) // tp), (h // tp, h)]
    if cfg.style == "gpt2":
        prods += [(h, f // tp), (f // tp, h)]
    else:
        prods += [(h, f // tp), (h, f // tp), (f // tp, h)]
    return prods


@lru_cache(maxsize=65536)
def layer_work(cfg, seq: int, batch: int, tp: int, sequence_parallel: bool,
               precision: str, device: str, fused_attention: bool = True) -> LayerWork:
    """The work of one block by pass (module docstring), cached."""
    dev = hardware.device(device)
    peak = peak_flops(device, precision)
    apeak = peak_flops(device, _attention_precision(precision))
    bw = dev.memory_bandwidth_Bps
    sms = SMS.get(dev.name)
    w = value_bytes(precision)
    m = batch * seq
    mm_f = mm_b = flops = 0.0
    for k, n in _layer_products(cfg, tp):
        a, b = _matmul(m, k, n, peak, sms)
        mm_f, mm_b = mm_f + a, mm_b + b
        flops += 2.0 * m * k * n
    h_loc, heads_loc = cfg.hidden / tp, cfg.heads / tp
    at_f = at_b = mem_f = mem_b = 0.0
    if fused_attention:
        af = 2.0 * batch * seq * seq * h_loc          # 4 b s^2 h, halved by the mask
        at_f, at_b = af / apeak, 2.5 * af / apeak
        attn_fwd = (0.0, at_f, 0.0, 0.0)
    else:
        af = 4.0 * batch * seq * seq * h_loc          # the whole square
        scores = batch * heads_loc * seq * seq
        mm_f, mm_b = mm_f + af / apeak, mm_b + 2.0 * af / apeak
        # softmax and its gradient (:func:`megatron_softmax`); Megatron's attention dropout
        # (p = 0.1 by default) writes a 1-byte mask and its output, and reads both again in
        # backward
        sm_f, sm_b, extra = megatron_softmax(batch, int(heads_loc), seq, w)
        mem_f = scores * (sm_f + w + 1) / bw
        mem_b = scores * (sm_b + w + 1) / bw
        attn_fwd = (af / apeak, 0.0, mem_f, extra)
    flops += af
    # memory-bound: 2 norms (read, write) and 2 residual adds (2 reads, a write), on s/t
    # rows with sequence parallelism
    hw = (m / tp if sequence_parallel else m) * cfg.hidden * w
    mem_f += (2 * 2 * hw + 2 * 3 * hw) / bw
    mem_b += (2 * 4 * hw + 2 * 2 * hw) / bw
    fw = m * (cfg.ffn / tp) * w
    if cfg.style == "gpt2":
        mem_f, mem_b = mem_f + 2 * fw / bw, mem_b + 3 * fw / bw   # GELU
    else:
        mem_f, mem_b = mem_f + 3 * fw / bw, mem_b + 5 * fw / bw   # SiLU(gate) x up
        qk = m * (cfg.hidden + cfg.kv_dim) / tp * w
        mem_f, mem_b = mem_f + 2 * qk / bw, mem_b + 2 * qk / bw   # rotary on q and k
    extra = attn_fwd[3]
    return LayerWork((mm_f, at_f, mem_f, 1.0 + extra), (mm_b, at_b, mem_b, 2.0 + extra),
                     attn_fwd, flops)


#: kernels one forward pass of a Megatron GPT layer issues with its fused kernels (fp16,
#: tensor-parallel): layer norm, QKV product, scores (baddbmm), fused scale-mask-softmax,
#: dropout, context (bmm), context transpose, output projection, its all-reduce,
#: bias-dropout-add (2), layer norm, fc1, bias-GELU, fc2, its all-reduce, bias-dropout-add
#: (2): 18. A layer pass of the host's time (``Efficiency.layer_s``) is this many launches.
MEGATRON_KERNELS_PER_PASS = 18


def megatron_softmax(batch: int, heads: int, seq: int, w: float) -> tuple[float, float, float]:
    """(forward bytes, backward bytes per attention score, extra layer passes the host
    issues) of Megatron-LM's ``FusedScaleMaskSoftmax`` on ``heads`` heads per rank.

    Its fused CUDA kernel (``scaled_upper_triang_masked_softmax``) reads and writes each
    score once (2 w forward; backward reads the gradient and the output and writes one:
    3 w). ``FusedScaleMaskSoftmax.is_kernel_available`` (megatron/model/fused_softmax.py,
    https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/fusions/fused_softmax.py)
    takes it only when ``16 < s <= 4096`` (the bound is 2,048 to 16,384 across versions;
    vTrain's 1,024 is inside all), ``s % 4 == 0`` and ``b x heads`` is a multiple of the
    kernel's batches per block (``get_batch_per_block``: 128 threads over warps of
    ``min(32, 2^ceil(log2 s))`` lanes, two batches per warp up to 128 keys: 4 for
    ``s > 128``, 8 below); otherwise ``forward_torch_softmax``
    runs in PyTorch in fp32 (``apply_query_key_layer_scaling`` forces
    ``attention_softmax_in_fp32``): ``.float()`` (w read, 4 written), the scale (4, 4),
    the in-place causal ``masked_fill_`` (4, 4), softmax (4, 4), ``.half()`` (4, w): 2 w +
    32 bytes forward, and the same five kernels' gradients backward (2 w + 36: softmax's
    gradient reads its output too). Four kernels more than the fused one in each pass."""
    per_block = 8 if seq <= 128 else 4
    if 16 < seq <= 4096 and seq % 4 == 0 and (batch * heads) % per_block == 0:
        return 2 * w, 3 * w, 0.0
    return 2 * w + 32.0, 2 * w + 36.0, 4.0 / MEGATRON_KERNELS_PER_PASS


@lru_cache(maxsize=65536)
def end_work(cfg, seq: int, batch: int, tp: int, precision: str, device: str,
             loss_bytes: float | None = None) -> EndWork:
    """Embedding, vocabulary head and cross-entropy of one micro-batch (vocabulary-
    parallel over t ranks), forward + backward, cached. ``loss_bytes``: bytes the loss
    moves per logit, forward and backward (None: a cross-entropy that upcasts the logits
    once, ``2 w + 12``; Megatron's: :data:`MEGATRON_LOSS_BYTES`)."""
    dev = hardware.device(device)
    peak = peak_flops(device, precision)
    bw = dev.memory_bandwidth_Bps
    w = value_bytes(precision)
    m = batch * seq
    emb = 3.0 * m * cfg.hidden * w / bw               # gather, and its scatter-add
    hf, hb = _matmul(m, cfg.hidden, math.ceil(cfg.vocab / tp), peak, SMS.get(dev.name))
    logits = m * cfg.vocab / tp
    per = (w + 4.0 + 4.0 + 4.0 + w) if loss_bytes is None else loss_bytes
    loss = logits * per / bw                          # upcast, softmax; the gradient
    return EndWork((0.0, 0.0, emb, 2.0), (hf + hb, 0.0, loss, 3.0))


#: Megatron-LM's ``vocab_parallel_cross_entropy`` on ``output.float()`` (GPT's default,
#: ``fp16_lm_cross_entropy`` off; megatron/core/tensor_parallel/cross_entropy.py,
#: https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/tensor_parallel/cross_entropy.py),
#: bytes per logit of 16-bit logits: the upcast (2 read, 4 written), the max (4), the
#: subtraction of it (4, 4), exp in place (4, 4), the sum (4), the division in place (4, 4)
#: forward; backward the in-place product with the loss gradient (4, 4) and the upcast's
#: gradient (4, 2).
MEGATRON_LOSS_BYTES = 6.0 + 4.0 + 8.0 + 8.0 + 4.0 + 8.0 + 8.0 + 6.0


def optimizer_work(params_on_rank: float, device: str, bytes_per_param: float = 28.0
                   ) -> Work:
    """AdamW over the rank's parameters: memory-bound, ``bytes_per_param`` each."""
    return (0.0, 0.0, params_on_rank * bytes_per_param / _bandwidth(device), 0.0)


@lru_cache(maxsize=64)
def _bandwidth(device: str) -> float:
    return hardware.device(device).memory_bandwidth_Bps
