"""Models that take token ids: which names are language models, their sequence length, and
how a user's own model is recognised as one.

- A built-in language model is a preset (:mod:`scalelab.models.presets`) or ``hf:PATH`` (a
  Hugging Face ``config.json``, :mod:`scalelab.models.hf`): :func:`built_in_lm` gives its
  :class:`~scalelab.models.config.TransformerConfig`, read once per file version.
- The sequence length (:func:`seq_len_of`): ``--seq-len S`` if given, else the one
  dimension of an input shape ``(S,)`` a caller passed, else ``min(1024, the model's
  positions)`` (1024 for a user's model whose positions are not known). It must be at least
  2 (the next-token loss predicts S - 1 ids) and no more than the model's positions.
- A user's ``package.module:factory`` takes tokens when its first layer (the first module
  without children, in registration order) is an ``nn.Embedding``
  (:func:`first_embedding`); its vocabulary is that embedding's ``num_embeddings``.

No torch is imported here but by :func:`first_embedding`, which is handed a built module.
"""

from __future__ import annotations

from functools import lru_cache

from scalelab.errors import UsageError
from scalelab.models import hf, presets
from scalelab.models.config import TransformerConfig

#: Inputs a model takes: image-like float tensors, or token ids (a language model)
INPUTS = ("image", "tokens")
#: How a token file stores its ids (auto: by the vocabulary, :func:`token_dtype`)
TOKEN_DTYPES = ("auto", "uint16", "uint32")
#: A language model's default sequence length: min(this, the model's positions)
DEFAULT_SEQ_LEN = 1024


def is_built_in(model: str) -> bool:
    """A language model scalelab builds itself: a preset name or ``hf:PATH``."""
    return presets.is_preset(model) or hf.is_hf(model)


@lru_cache(maxsize=64)
def _built_in(model: str, version: int) -> TransformerConfig | None:
    if presets.is_preset(model):
        return presets.preset(model)
    return hf.load(model) if hf.is_hf(model) else None


def built_in_lm(model: str) -> TransformerConfig | None:
    """The transformer a preset name or ``hf:PATH`` names (None for any other model); an
    ``hf:`` file is read again when it has changed (its modification time)."""
    version = 0
    if hf.is_hf(model):
        try:
            version = hf.config_path(model).stat().st_mtime_ns
        except OSError:
            version = -1  # hf.load says what is wrong with the path
    return _built_in(model, version)


def seq_len_of(model: str, shape: tuple[int, ...], seq_len: int,
               lm: TransformerConfig | None) -> int:
    """The sequence length of a token model (rules in the module's docstring)."""
    if len(shape) > 1 or (shape and seq_len and int(shape[0]) != seq_len):
        raise UsageError(f"model {model!r} takes token ids: give --seq-len S, not "
                         f"--input-shape {','.join(map(str, shape))}")
    seq = seq_len or (int(shape[0]) if shape else 0)
    positions = lm.max_seq if lm is not None else None
    if not seq:
        seq = min(DEFAULT_SEQ_LEN, positions or DEFAULT_SEQ_LEN)
    if seq < 2:
        raise UsageError(f"--seq-len must be at least 2 (the next-token loss), got {seq}")
    if positions is not None and seq > positions:
        raise UsageError(f"--seq-len {seq} is beyond {model}'s {positions} positions")
    return seq


def token_dtype(told: str, vocab: int) -> str:
    """The dtype of a token file's ids: ``told`` (uint16 or uint32), or for ``auto`` uint16
    where every id of the vocabulary fits in 16 bits (vocab <= 65,536: GPT-2's 50,257, as
    nanoGPT writes its ``train.bin``), else uint32 (Llama 3's 128,256)."""
    if told != "auto":
        return told
    return "uint16" if vocab <= 1 << 16 else "uint32"


def first_embedding(module):
    """``module``'s first layer if it is an ``nn.Embedding`` (the first module without
    children, in registration order), else None."""
    from torch import nn

    for sub in module.modules():
        if not any(True for _ in sub.children()):
            return sub if isinstance(sub, nn.Embedding) else None
    return None


def any_embedding(module):
    """The first ``nn.Embedding`` anywhere in ``module`` (None if it has none)."""
    from torch import nn

    return next((m for m in module.modules() if isinstance(m, nn.Embedding)), None)
