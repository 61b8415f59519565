"""Small language models the tests name on the command line (``tests.lm_models:tiny``):
built-in transformers of a few layers, and a user's own model taking token ids."""

from __future__ import annotations

import os
import signal

from torch import nn

from scalelab.models.config import TransformerConfig
from scalelab.models.model import Transformer

TINY = TransformerConfig("tiny", "gpt2", layers=2, hidden=64, heads=4, vocab=256, max_seq=64)
TINY_LLAMA = TransformerConfig("tiny-llama", "llama", layers=2, hidden=64, heads=4,
                               kv_heads=2, vocab=256, ffn=128, max_seq=64)
# one large embedding beside small blocks: the uneven-shard case of a parameter server
WIDE_VOCAB = TransformerConfig("wide-vocab", "gpt2", layers=2, hidden=64, heads=4,
                               vocab=8192, max_seq=64)


def tiny() -> nn.Module:
    return Transformer(TINY)


def tiny_llama() -> nn.Module:
    return Transformer(TINY_LLAMA)


def wide_vocab() -> nn.Module:
    return Transformer(WIDE_VOCAB)


class EncoderLM(nn.Module):
    """nn.Embedding, nn.TransformerEncoder and a vocabulary head: a user's model."""

    def __init__(self, vocab: int = 128, hidden: int = 32):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        layer = nn.TransformerEncoderLayer(hidden, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x):
        return self.head(self.encoder(self.emb(x)))


def encoder_lm() -> nn.Module:
    return EncoderLM()


class _FaultyLM(Transformer):
    """``tiny`` that SIGKILLs itself at step STEP on rank RANK when ``LM_FAIL=RANK:STEP``."""

    def __init__(self):
        super().__init__(TINY)
        rank, step = (os.environ.get("LM_FAIL", ":").split(":") + [""])[:2]
        self.fail_step = int(step) if rank == os.environ.get("RANK") and step else None
        self.calls = 0

    def forward(self, x):
        if self.fail_step is not None and self.calls == self.fail_step:
            os.kill(os.getpid(), signal.SIGKILL)
        self.calls += 1
        return super().forward(x)


def faulty_tiny() -> nn.Module:
    return _FaultyLM()
