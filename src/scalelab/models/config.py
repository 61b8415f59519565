"""A decoder-only transformer described by its published hyperparameters.

:class:`TransformerConfig` is the one statement of a language model's shape: the planner
counts its parameters, FLOPs and activations from it, the model module
(:mod:`scalelab.models.model`) builds it, and the parallel runners split it. It holds no
torch and builds nothing.

Two families, as their reference implementations write them:

- ``gpt2``: LayerNorm, a GELU MLP of width ``ffn``, learned positions, biases on every
  linear and norm, the vocabulary head tied to the token embedding (Radford et al. 2019).
- ``llama``: RMSNorm, a SwiGLU MLP (gate, up, down), rotary positions, grouped-query
  attention with ``kv_heads`` key/value heads, no biases, an untied head (Touvron et al.
  2023; Dubey et al. 2024).

Parameter count (:meth:`TransformerConfig.param_count`), with h = hidden, f = ffn, a heads,
k kv_heads, d = h / a, V vocab, P positions, L layers:

- attention: q and o are h x h, k and v are h x (k d); gpt2 adds a bias of each width;
- MLP: gpt2 two matrices h x f and f x h with biases f and h; llama three of h x f;
- norms: LayerNorm 2h (weight and bias), RMSNorm h; two per block and one at the end;
- embedding V h (+ P h learned positions); head V h when untied (tied: the same tensor).

Module names (the contract the parallel plans and FSDP units rely on, as torchtitan's
Llama names them): ``tok_emb``, ``pos_emb`` (gpt2 only), ``blocks`` (a ``ModuleDict``
keyed ``"0"`` .. ``"L-1"``), each block ``attn_norm``, ``attn`` (``wq``, ``wk``, ``wv``,
``wo``), ``mlp_norm``, ``mlp`` (gpt2: ``fc``, ``proj``; llama: ``w1`` gate, ``w3`` up,
``w2`` down), then ``norm`` and ``head``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

STYLES = ("gpt2", "llama")


@dataclass(frozen=True)
class TransformerConfig:
    """A decoder-only transformer's hyperparameters. Validated on creation."""

    name: str
    style: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    ffn: int = 0            # 0: 4 x hidden (gpt2's width)
    kv_heads: int = 0       # 0: as many as heads (multi-head attention)
    max_seq: int = 2048     # positions the model takes (gpt2: its learned table)
    tied: bool | None = None    # None: the style's (gpt2 tied, llama untied)
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    source: str = ""

    def __post_init__(self):
        if self.style not in STYLES:
            raise ValueError(f"unknown transformer style {self.style!r} ({', '.join(STYLES)})")
        for key in ("layers", "hidden", "heads", "vocab", "max_seq"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{self.name}: {key} must be a positive integer, got {v!r}")
        for key in ("ffn", "kv_heads"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{self.name}: {key} must be a positive integer, got {v!r}")
        if not self.ffn:
            object.__setattr__(self, "ffn", 4 * self.hidden)
        if not self.kv_heads:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.tied is None:
            object.__setattr__(self, "tied", self.style == "gpt2")
        if self.hidden % self.heads:
            raise ValueError(f"{self.name}: hidden {self.hidden} is not divisible by "
                             f"{self.heads} attention heads")
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.name}: {self.heads} attention heads are not divisible "
                             f"by {self.kv_heads} key/value heads")
        if (self.hidden // self.heads) % 2 and self.style == "llama":
            raise ValueError(f"{self.name}: rotary positions need an even head width, "
                             f"got {self.hidden // self.heads}")

    # -- shape -------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def bias(self) -> bool:
        return self.style == "gpt2"

    # -- parameters ----------------------------------------------------------------------
    def norm_params(self) -> int:
        return 2 * self.hidden if self.style == "gpt2" else self.hidden

    def attention_params(self) -> int:
        h, kv = self.hidden, self.kv_dim
        weights = 2 * h * h + 2 * h * kv
        return weights + (2 * h + 2 * kv if self.bias else 0)

    def mlp_params(self) -> int:
        h, f = self.hidden, self.ffn
        if self.style == "gpt2":
            return 2 * h * f + f + h
        return 3 * h * f

    def block_params(self) -> int:
        return self.attention_params() + self.mlp_params() + 2 * self.norm_params()

    def embedding_params(self) -> int:
        """The token embedding, plus learned positions (gpt2)."""
        return self.vocab * self.hidden + (self.max_seq * self.hidden
                                            if self.style == "gpt2" else 0)

    def head_params(self) -> int:
        """The vocabulary head's own parameters: 0 when tied to the embedding."""
        return 0 if self.tied else self.vocab * self.hidden

    def param_count(self) -> int:
        """Every parameter once (a tied head is the embedding's tensor)."""
        return (self.embedding_params() + self.layers * self.block_params()
                + self.norm_params() + self.head_params())

    def non_embedding_params(self) -> int:
        """N of the 6N + 12 L h s count: all parameters but the token and position
        embeddings (an untied head stays in N, as torchtitan subtracts only the
        embedding table)."""
        return self.param_count() - self.embedding_params()

    # -- variants ------------------------------------------------------------------------
    def with_layers(self, layers: int) -> TransformerConfig:
        """The same widths with fewer (or more) layers: a reduced copy that runs here."""
        return replace(self, name=f"{self.name}[{layers}L]", layers=layers)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TransformerConfig:
        keys = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in keys})
