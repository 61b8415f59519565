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
  launches and gaps the roofline does not explain (fitted).

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


@dataclass(frozen=True)
class LayerTimes:
    """One layer on one tensor rank, one micro-batch: seconds per pass."""

    forward_s: float
    backward_s: float
    attention_fwd_s: float  # the attention core's forward (what selective recomputation reruns)
    flops_forward: float    # FLOPs of one forward


@dataclass(frozen=True)
class EndTimes:
    """The parts outside the blocks, one micro-batch: embedding (stage 0), head and loss
    (last stage)."""

    embed_fwd_s: float
    embed_bwd_s: float
    head_fwd_s: float
    head_bwd_s: float


def value_bytes(precision: str) -> float:
    """Bytes of an activation value: 4 in fp32/tf32, 2 in bf16/fp16 (and under fp8
    linears, whose outputs stay bf16)."""
    return 4.0 if precision in ("fp32", "tf32") else 2.0


def peak_flops(device: str, precision: str) -> float:
    """The device's dense peak for the matrix products at ``precision`` (fp8: the bf16 peak
    doubled where the catalog gives no fp8 figure is *not* assumed: bf16's is used)."""
    dev = hardware.device(device)
    p = "bf16" if precision == "fp8" else precision
    peak = dev.peak_flops(p)
    if peak is None:
        raise ValueError(f"{device} has no {precision} peak in the catalog")
    return peak


def _wave(m: float, n: float, sms: int | None) -> float:
    """Wave-quantization factor >= 1 of an m x n output (module docstring)."""
    if not sms:
        return 1.0
    tiles = math.ceil(m / TILE) * math.ceil(n / TILE)
    waves = math.ceil(tiles / sms)
    pad_m, pad_n = math.ceil(m / TILE) * TILE, math.ceil(n / TILE) * TILE
    return waves * sms / tiles * (pad_m * pad_n) / (m * n)


def _matmul_s(m: float, k: float, n: float, peak: float, e: float, sms: int | None
              ) -> tuple[float, float]:
    """(forward, backward) seconds of an m x k by k x n product and its two gradients."""
    f = 2.0 * m * k * n / (peak * e)
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
def layer_times(cfg, seq: int, batch: int, tp: int, sequence_parallel: bool,
                precision: str, device: str, eff: Efficiency, fused_attention: bool = True
                ) -> LayerTimes:
    """Forward and backward seconds of one block (module docstring), cached."""
    dev = hardware.device(device)
    peak = peak_flops(device, precision)
    bw = dev.memory_bandwidth_Bps * eff.memory
    sms = SMS.get(dev.name)
    w = value_bytes(precision)
    m = batch * seq
    fwd = bwd = flops = 0.0
    for k, n in _layer_products(cfg, tp):
        a, b = _matmul_s(m, k, n, peak, eff.matmul, sms)
        fwd, bwd = fwd + a, bwd + b
        flops += 2.0 * m * k * n
    h_loc, heads_loc = cfg.hidden / tp, cfg.heads / tp
    if fused_attention:
        af = 2.0 * batch * seq * seq * h_loc          # 4 b s^2 h, halved by the mask
        attn = af / (peak * eff.attention)
        fwd += attn
        bwd += 2.5 * af / (peak * eff.attention)
        flops += af
    else:
        af = 4.0 * batch * seq * seq * h_loc
        attn = af / (peak * eff.matmul) + batch * heads_loc * seq * seq * 2 * w / bw
        fwd += af / (peak * eff.matmul)
        bwd += 2.0 * af / (peak * eff.matmul)
        flops += af
        scores = batch * heads_loc * seq * seq
        fwd += scores * 2 * w / bw                    # read the scores, write the softmax
        bwd += scores * 3 * w / bw                    # read softmax and its gradient, write
    # memory-bound: norms and residuals on s/t rows with sequence parallelism
    rows = m / tp if sequence_parallel else m
    hw = rows * cfg.hidden * w
    fwd += (2 * 2 * hw + 2 * 3 * hw) / bw             # 2 norms (r+w), 2 residual adds
    bwd += (2 * 4 * hw + 2 * 2 * hw) / bw
    fw = m * (cfg.ffn / tp) * w
    if cfg.style == "gpt2":
        fwd, bwd = fwd + 2 * fw / bw, bwd + 3 * fw / bw   # GELU
    else:
        fwd, bwd = fwd + 3 * fw / bw, bwd + 5 * fw / bw   # SiLU x up
        qk = m * (cfg.hidden + cfg.kv_dim) / tp * w
        fwd, bwd = fwd + 2 * qk / bw, bwd + 2 * qk / bw   # rotary on q and k
    return LayerTimes(fwd + eff.layer_s, bwd + 2.0 * eff.layer_s, attn, flops)


@lru_cache(maxsize=65536)
def end_times(cfg, seq: int, batch: int, tp: int, precision: str, device: str,
              eff: Efficiency) -> EndTimes:
    """Embedding, vocabulary head and cross-entropy of one micro-batch (vocabulary-
    parallel over t ranks), cached."""
    dev = hardware.device(device)
    peak = peak_flops(device, precision)
    bw = dev.memory_bandwidth_Bps * eff.memory
    sms = SMS.get(dev.name)
    w = value_bytes(precision)
    m = batch * seq
    emb = m * cfg.hidden * w / bw
    hf, hb = _matmul_s(m, cfg.hidden, math.ceil(cfg.vocab / tp), peak, eff.matmul, sms)
    logits = m * cfg.vocab / tp
    loss_f = logits * (w + 4.0 + 4.0) / bw           # read, upcast to fp32, softmax
    loss_b = logits * (4.0 + w) / bw                 # the logits' gradient
    return EndTimes(emb, 2.0 * emb, hf + loss_f + eff.layer_s, hb + loss_b + eff.layer_s)


def optimizer_s(params_on_rank: float, device: str, eff: Efficiency,
                bytes_per_param: float = 28.0) -> float:
    """AdamW over the rank's parameters: memory-bound, ``bytes_per_param`` each."""
    dev = hardware.device(device)
    return params_on_rank * bytes_per_param / (dev.memory_bandwidth_Bps * eff.memory)
