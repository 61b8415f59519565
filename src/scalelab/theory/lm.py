"""Decoder-only transformer language models: FLOPs, MFU, activation and state memory, time.

Symbols: L layers, h hidden, a attention heads, f MLP width, V vocabulary, s sequence
length (tokens), b micro-batch (sequences), t tensor-parallel degree, N parameters without
the embedding (an untied head stays in N). Pure functions: numbers in, numbers out.

FLOPs per token (training: forward + backward = 3 x forward, a matrix product of an
m x k by a k x n matrix costing 2 m k n):

- every weight w is used once per token in forward (2 FLOPs: multiply and add) and twice in
  backward (the gradient of the input and of the weight): 6 N;
- attention's two products per layer, q k^T and the weighted sum of v, each 2 s h FLOPs per
  token forward, 3 x that for training: 12 L h s. The causal mask is *not* subtracted.

  **6 N + 12 L h s** is the count of PaLM (Chowdhery et al. 2022, appendix B) and of
  torchtitan (``get_nparams_and_flops``: ``6 * (nparams - nparams_embedding) +
  12 * l * h * q * t`` with h heads of width q), with N excluding the embedding:
  :func:`flops_per_token`. llm-foundry counts ``6 P + 12 L h s`` with P *every* parameter
  (its benchmark table's numparams, embedding included): :func:`llmfoundry_flops_per_token`.
  Megatron-LM (Narayanan et al. 2021, eq. 3) counts per iteration of B sequences
  ``96 B s L h^2 (1 + s / 6h + V / 16 L h)``, which *includes* full recomputation's second
  forward of the layers (4 passes x 24 B s L h^2; the head 3) and assumes f = 4h:
  :func:`megatron_flops_per_iteration`.

Hardware FLOPs (HFU) add what recomputation runs again: full recomputation a second forward
(2 N + 4 L h s per token), selective recomputation (Korthikanti et al. 2022) only the
attention core's forward (4 L h s): :func:`hfu_flops_per_token`.

MFU = achieved model FLOP/s / (GPUs x the device's dense peak at the precision):
:func:`mfu`.
"""

from __future__ import annotations

import math

RECOMPUTE = ("none", "selective", "full")


def _pos(name: str, v: float) -> None:
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
            and math.isfinite(v)):
        raise ValueError(f"{name} must be a positive number, got {v!r}")


def _recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r} ({', '.join(RECOMPUTE)})")


# -- FLOPs -------------------------------------------------------------------------------
def flops_per_token(non_embedding_params: float, layers: int, hidden: int, seq: int) -> float:
    """Model FLOPs per trained token, **6 N + 12 L h s** (PaLM's and torchtitan's count; N
    without the embedding). Derivation in the module docstring."""
    _pos("non_embedding_params", non_embedding_params)
    for k, v in (("layers", layers), ("hidden", hidden), ("seq", seq)):
        _pos(k, v)
    return 6.0 * non_embedding_params + 12.0 * layers * hidden * seq


def llmfoundry_flops_per_token(params: float, layers: int, hidden: int, seq: int) -> float:
    """llm-foundry's count, ``6 P + 12 L h s`` with P all parameters, embedding included.

    Its ``scripts/train/benchmarking/collect_results.py`` computes per sequence
    ``flops_per_seq = 2 P s`` and ``attn_flops_per_seq = L * 2 * 2 * (h * s^2)``, and
    ``mfu = (3 flops_per_seq + 3 attn_flops_per_seq) * throughput / (gpus * peak)``;
    per token that is 6 P + 12 L h s. It differs from :func:`flops_per_token` only in
    keeping the (tied) embedding in P.
    """
    return flops_per_token(params, layers, hidden, seq)


def megatron_flops_per_iteration(batch: int, seq: int, layers: int, hidden: int, vocab: int,
                                 recompute: bool = True) -> float:
    """Megatron-LM's count for one iteration of ``batch`` sequences (Narayanan et al. 2021,
    "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
    eq. 3): ``96 B s L h^2 (1 + s / 6h + V / 16 L h)``.

    Per layer forward: 24 B s h^2 (the four h x h-sized products with f = 4h: q k v 6, out
    2, MLP 16, times B s) + 4 B s^2 h (attention); the head 2 B s h V. With full
    recomputation each layer runs 4 times (forward, forward again, backward x 2): 96; the
    head's ``V / 16 L h`` term gives ``6 B s h V``, its 3 passes (it is not recomputed).
    Without recomputation: ``72 B s L h^2 (1 + s / 6h) + 6 B s h V`` (3 passes of
    everything).
    """
    for k, v in (("batch", batch), ("seq", seq), ("layers", layers), ("hidden", hidden),
                 ("vocab", vocab)):
        _pos(k, v)
    bslh2 = batch * seq * layers * hidden ** 2
    if recompute:
        return 96.0 * bslh2 * (1.0 + seq / (6.0 * hidden) + vocab / (16.0 * layers * hidden))
    return 72.0 * bslh2 * (1.0 + seq / (6.0 * hidden)) + 6.0 * batch * seq * hidden * vocab


def hfu_flops_per_token(non_embedding_params: float, layers: int, hidden: int, seq: int,
                        recompute: str = "none") -> float:
    """Hardware FLOPs per token: the model's 6 N + 12 L h s plus what recomputation runs
    again: full, a second forward 2 N + 4 L h s (8 N + 16 L h s in all); selective
    (Korthikanti et al. 2022, sec. 5), the attention core's forward 4 L h s."""
    _recompute(recompute)
    model = flops_per_token(non_embedding_params, layers, hidden, seq)
    if recompute == "full":
        return model + 2.0 * non_embedding_params + 4.0 * layers * hidden * seq
    if recompute == "selective":
        return model + 4.0 * layers * hidden * seq
    return model


def mfu(tokens_per_s: float, flops_per_token_: float, peak_flops: float, gpus: int = 1
        ) -> float:
    """Model FLOPs utilization: tokens/s x FLOPs per token / (GPUs x dense peak FLOP/s).

    ``tokens_per_s`` is the whole cluster's; pass ``gpus=1`` with a per-GPU rate.
    """
    for k, v in (("tokens_per_s", tokens_per_s), ("flops_per_token", flops_per_token_),
                 ("peak_flops", peak_flops), ("gpus", gpus)):
        _pos(k, v)
    return tokens_per_s * flops_per_token_ / (gpus * peak_flops)


# -- activation memory -------------------------------------------------------------------
def korthikanti_bytes_per_layer(seq: int, batch: int, hidden: int, heads: int,
                                tp: int = 1, sequence_parallel: bool = False,
                                recompute: str = "none", flash: bool = False) -> float:
    """Activation bytes one transformer layer keeps for backward, 16-bit values, 1-byte
    dropout masks, f = 4h (Korthikanti et al. 2022, "Reducing Activation Recomputation in
    Large Transformer Models", sec. 4, eqs. 1-4):

    - no parallelism: ``s b h (34 + 5 a s / h)``. 34 = attention 11 (its input 2, q and k
      4, v 2, the output projection's input 2, dropout mask 1) + MLP 19 (input 2, GELU's
      input 8, the second product's input 8, mask 1) + two LayerNorms' inputs 4; the
      ``5 a s^2 b`` term is the softmax output 2, its dropout mask 1 and its output 2;
    - tensor parallel t: ``s b h (10 + 24 / t + 5 a s / (h t))`` (norms' inputs and masks
      stay whole);
    - with sequence parallelism: ``s b h / t (34 + 5 a s / h)``;
    - selective recomputation (the attention core again in backward): the ``5 a s / h``
      term goes, ``34 s b h / t`` with sequence parallelism;
    - full recomputation: only each layer's input, ``2 s b h`` (/ t with sequence
      parallelism);
    - ``flash``: a fused attention kernel (FlashAttention, SDPA's flash or memory-efficient
      kernels) keeps no s x s matrix: the ``5 a s / h`` term goes (its row statistics,
      ``4 a s b`` bytes, are kept instead and counted).
    """
    _recompute(recompute)
    for k, v in (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads),
                 ("tp", tp)):
        _pos(k, v)
    sbh = float(seq) * batch * hidden
    if recompute == "full":
        return 2.0 * sbh / (tp if sequence_parallel else 1)
    quad = 0.0 if (flash or recompute == "selective") else 5.0 * heads * seq / hidden
    stats = 4.0 * heads * seq * batch / tp if flash and recompute != "selective" else 0.0
    if sequence_parallel or tp == 1:
        return sbh / tp * (34.0 + quad) + stats
    return sbh * (10.0 + 24.0 / tp + quad / tp) + stats


def layer_activation_bytes(seq: int, batch: int, hidden: int, heads: int, ffn: int = 0, *,
                           kv_dim: int = 0, style: str = "gpt2", value_bytes: float = 2.0,
                           dropout: bool = True, mask_bytes: float = 1.0,
                           flash: bool = False, output_copies: int = 1,
                           norm_stats_bytes: float = 0.0) -> float:
    """Korthikanti et al.'s count term by term, for a block as a given implementation runs
    it: the values (each ``s b`` elements wide) one layer keeps for backward.

    - two norms' inputs: 2 h; attention: the normed input h, q h, k and v ``kv_dim`` each,
      the attention output h x ``output_copies`` (Megatron's [s, b, h] layout feeds it to
      the output projection as is: 1; a (b, a, s, d) kernel output that is transposed to
      a contiguous copy before the projection keeps both: 2);
    - the core: unfused, the softmax output (a s), with dropout its mask (a s at
      ``mask_bytes``) and output (a s); fused (``flash``), only the row statistics
      (4-byte log-sum-exp, a per row);
    - the MLP: gpt2 its input h, GELU's input f and the second product's input f; llama its
      input h, gate, up, SiLU(gate) and their product, 4 f; llama's rotary also keeps the
      unrotated q and k (h + kv_dim);
    - dropout masks after attention and after the MLP (h each, ``mask_bytes``);
    - ``norm_stats_bytes`` per row for the norms' saved statistics (LayerNorm: mean and
      1/std, 2 x 2 x 4 bytes in fp32).

    With gpt2, f = 4h, 2-byte values, dropout, 1-byte masks and no flash this is exactly
    :func:`korthikanti_bytes_per_layer`'s ``s b h (34 + 5 a s / h)``.
    """
    for k, v in (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads)):
        _pos(k, v)
    if style not in ("gpt2", "llama"):
        raise ValueError(f"unknown style {style!r} (gpt2, llama)")
    h, f, kv = hidden, ffn or 4 * hidden, kv_dim or hidden
    values = 2 * h + h + h + 2 * kv + output_copies * h
    values += h + (2 * f if style == "gpt2" else 4 * f)
    if style == "llama":
        values += h + kv
    sb = float(seq) * batch
    out = values * value_bytes * sb + norm_stats_bytes * sb
    if dropout:
        out += 2 * h * mask_bytes * sb
    if flash:
        out += 4.0 * heads * sb
    else:
        out += heads * seq * sb * (value_bytes * (2 if dropout else 1)
                                   + (mask_bytes if dropout else 0.0))
    return out


def head_activation_bytes(seq: int, batch: int, hidden: int, vocab: int,
                          value_bytes: float = 2.0, logits_copies: int = 0,
                          norm_stats_bytes: float = 0.0) -> float:
    """What the final norm, the vocabulary head and the cross-entropy keep: the norm's
    input and the head's input (h each) and the log-softmax's output (V; its backward
    needs only its output, so the logits themselves are not kept), plus ``logits_copies``
    V-wide tensors an implementation keeps beside it (an upcast copy saved by another
    operation, say)."""
    sb = float(seq) * batch
    return sb * (value_bytes * (2 * hidden + (1 + logits_copies) * vocab) + norm_stats_bytes)


def state_bytes_per_param(scheme: str = "torch-amp") -> dict:
    """Bytes per parameter of mixed-precision AdamW state, by what the framework keeps.

    - ``torch-amp`` (PyTorch autocast, and FSDP's ``MixedPrecisionPolicy(param_dtype=bf16,
      reduce_dtype=fp32)``): the parameters *are* the fp32 master weights (4), their fp32
      gradients (4), AdamW's exp_avg and exp_avg_sq in fp32 (8): 16 bytes. The 16-bit copy
      of the weights is made per use (autocast's cast cache, FSDP's unsharded bf16 gather)
      and is transient, not state.
    - ``pure-bf16`` (llm-foundry's ``PURE``): bf16 parameters 2 and gradients 2, AdamW in
      fp32 8 (no master copy): 12 bytes.
    - ``megatron`` (Megatron-LM's mixed precision, the ZeRO paper's count plus fp32 main
      gradients): 16-bit weights 2, fp32 main gradients 4, fp32 master weights 4 + Adam 8:
      18 bytes.
    - ``fp32``: 4 + 4 + 8 = 16, everything in fp32.
    """
    table = {"torch-amp": (4, 4, 8), "pure-bf16": (2, 2, 8), "megatron": (2, 4, 12),
             "fp32": (4, 4, 8)}
    if scheme not in table:
        raise ValueError(f"unknown state scheme {scheme!r} ({', '.join(table)})")
    p, g, k = table[scheme]
    return {"params": p, "grads": g, "optimizer": k}


# -- time and cost -----------------------------------------------------------------------
def train_seconds(tokens: float, tokens_per_s: float) -> float:
    """Time to train a token budget: tokens / (cluster tokens per second)."""
    _pos("tokens", tokens)
    _pos("tokens_per_s", tokens_per_s)
    return tokens / tokens_per_s


def train_cost(tokens: float, tokens_per_s: float, gpus: int, price_per_gpu_hour: float
               ) -> float:
    """Cost of a token budget: GPUs x hours x price per GPU-hour."""
    _pos("gpus", gpus)
    _pos("price_per_gpu_hour", price_per_gpu_hour)
    return gpus * train_seconds(tokens, tokens_per_s) / 3600.0 * price_per_gpu_hour


def cost_per_million_tokens(tokens_per_s: float, gpus: int, price_per_gpu_hour: float
                            ) -> float:
    """Price of one million trained tokens: GPUs x price per hour / tokens per hour x 1e6."""
    return train_cost(1e6, tokens_per_s, gpus, price_per_gpu_hour)
