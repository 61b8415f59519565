"""The decoder-only transformer of a :class:`~scalelab.models.config.TransformerConfig`.

One module per block (the unit FSDP wraps, checkpointing recomputes and a pipeline stage
holds), attention through ``F.scaled_dot_product_attention`` with the causal mask (its
flash or memory-efficient kernel where the device has one, so no s x s score matrix is
kept for backward there). Written as nanoGPT and torchtitan write theirs:

- ``gpt2`` style: LayerNorm, GELU MLP, learned positions, biases, head tied to ``tok_emb``;
- ``llama`` style: RMSNorm, SwiGLU MLP, rotary positions (applied to q and k), grouped-
  query attention (k and v heads repeated to the query heads), untied head.

A pipeline stage is the same class with the modules it does not hold set to ``None``
(``tok_emb``/``pos_emb`` on every stage but the first, ``norm``/``head`` on every stage but
the last) and the blocks it does not hold deleted from ``blocks``: :meth:`Transformer.forward`
skips what is missing, so a stage takes token ids or hidden states and returns hidden
states or logits. Attention reads its number of local heads from its weights' shapes, so a
tensor-parallel split of ``wq``/``wk``/``wv`` (DTensor's ``ColwiseParallel`` with
``use_local_output``) needs no other change.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from scalelab.models.config import TransformerConfig


class RMSNorm(nn.Module):
    """x / rms(x) * weight (Zhang and Sennrich 2019), computed in fp32."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def _norm(cfg: TransformerConfig) -> nn.Module:
    if cfg.style == "gpt2":
        return nn.LayerNorm(cfg.hidden, eps=cfg.norm_eps)
    return RMSNorm(cfg.hidden, cfg.norm_eps)


def rope_tables(cfg: TransformerConfig, seq_len: int, device=None):
    """cos and sin of the rotary angles, (seq_len, head_dim / 2) each (Su et al. 2021)."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, device=device).float() / d))
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inv)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x (batch, heads, seq, head_dim) by the angles."""
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    c, s = cos[None, None], sin[None, None]
    out = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    return out.type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.head_dim = cfg.head_dim
        self.rotary = cfg.style == "llama"
        b = cfg.bias
        self.wq = nn.Linear(cfg.hidden, cfg.hidden, bias=b)
        self.wk = nn.Linear(cfg.hidden, cfg.kv_dim, bias=b)
        self.wv = nn.Linear(cfg.hidden, cfg.kv_dim, bias=b)
        self.wo = nn.Linear(cfg.hidden, cfg.hidden, bias=b)

    def forward(self, x: torch.Tensor, rope=None) -> torch.Tensor:
        bsz, seq, _ = x.shape
        q = self.wq(x).view(bsz, seq, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(bsz, seq, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(bsz, seq, -1, self.head_dim).transpose(1, 2)
        if self.rotary:
            cos, sin = rope
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        groups = q.shape[1] // k.shape[1]
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(bsz, seq, -1))


class MLP(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.swiglu = cfg.style == "llama"
        if self.swiglu:
            self.w1 = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
            self.w3 = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
            self.w2 = nn.Linear(cfg.ffn, cfg.hidden, bias=False)
        else:
            self.fc = nn.Linear(cfg.hidden, cfg.ffn)
            self.proj = nn.Linear(cfg.ffn, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.attn_norm = _norm(cfg)
        self.attn = Attention(cfg)
        self.mlp_norm = _norm(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, rope=None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rope)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    """Token ids (batch, seq) -> logits (batch, seq, vocab)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos_emb = nn.Embedding(cfg.max_seq, cfg.hidden) if cfg.style == "gpt2" else None
        self.blocks = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.layers)})
        self.norm = _norm(cfg)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied:
            self.head.weight = self.tok_emb.weight
        self.init_weights()

    def init_weights(self) -> None:
        """GPT-2's initialization: normal(0, 0.02) weights, zero biases, and the residual
        projections (``wo``, the MLP's output) scaled by 1/sqrt(2 L)."""
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                scale = 1 / math.sqrt(2 * self.cfg.layers) if name.endswith(
                    ("attn.wo.weight", "mlp.proj.weight", "mlp.w2.weight")) else 1.0
                nn.init.normal_(p, mean=0.0, std=std * scale)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.shape[1]
        if seq > self.cfg.max_seq:
            raise ValueError(f"sequence of {seq} tokens is longer than the model's "
                             f"{self.cfg.max_seq} positions")
        if self.tok_emb is not None:
            h = self.tok_emb(x)
            if self.pos_emb is not None:
                h = h + self.pos_emb(torch.arange(seq, device=x.device))
        else:
            h = x
        rope = rope_tables(self.cfg, seq, h.device) if self.cfg.style == "llama" else None
        for block in self.blocks.values():
            h = block(h, rope)
        if self.norm is not None:
            h = self.norm(h)
        if self.head is not None:
            h = self.head(h)
        return h


def build(cfg: TransformerConfig, seed: int | None = 0) -> Transformer:
    """The model of ``cfg``; with a seed its initial parameters are the same everywhere."""
    if seed is not None:
        torch.manual_seed(seed)
    return Transformer(cfg)


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting tokens[:, 1:] from logits[:, :-1] (next token)."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                           tokens[:, 1:].reshape(-1))


class NextTokenLoss(nn.Module):
    """:func:`next_token_loss` as a loss module: ``loss(logits, tokens)``."""

    def forward(self, logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return next_token_loss(logits, tokens)
