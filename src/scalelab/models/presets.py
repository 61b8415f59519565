"""Named language models with their published hyperparameters, the source beside each.

Parameter counts these give (:meth:`TransformerConfig.param_count`; the published figure
in brackets): gpt2 124,439,808 (124M), llama2-7b 6.74B (7B; 6.74B in Hugging Face's
model card), llama3-8b 8.03B, llama3-70b 70.6B, llama3-405b 405.9B (Dubey et al. 2024,
Table 3 gives the shapes; the counts are those of the released checkpoints).
"""

from __future__ import annotations

import difflib

from scalelab.models.config import TransformerConfig

# Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", Table 2
# (layers, d_model); vocabulary 50,257 and 1,024 positions from the released
# configuration (openai-community/gpt2 config.json: n_layer, n_embd, n_head, n_ctx).
_GPT2 = "Radford et al. 2019 (GPT-2), Table 2; openai-community/{name} config.json"
# Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat Models", Table 1 and
# meta-llama/Llama-2-{size}-hf config.json (intermediate_size, num_key_value_heads).
_LLAMA2 = "Touvron et al. 2023 (Llama 2), Table 1; meta-llama/Llama-2-{size}-hf config.json"
# Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3 (layers, model dimension, FFN
# dimension, attention heads, key/value heads, vocabulary 128K: 128,256 in the released
# tokenizer, RoPE theta 500,000); meta-llama/Meta-Llama-3-{size} config.json.
_LLAMA3 = "Dubey et al. 2024 (Llama 3 herd), Table 3; meta-llama/Meta-Llama-3-{size} config.json"

PRESETS: dict[str, TransformerConfig] = {
    c.name: c for c in (
        TransformerConfig("gpt2", "gpt2", layers=12, hidden=768, heads=12, vocab=50257,
                          max_seq=1024, source=_GPT2.format(name="gpt2")),
        TransformerConfig("gpt2-medium", "gpt2", layers=24, hidden=1024, heads=16,
                          vocab=50257, max_seq=1024, source=_GPT2.format(name="gpt2-medium")),
        TransformerConfig("gpt2-large", "gpt2", layers=36, hidden=1280, heads=20,
                          vocab=50257, max_seq=1024, source=_GPT2.format(name="gpt2-large")),
        TransformerConfig("gpt2-xl", "gpt2", layers=48, hidden=1600, heads=25, vocab=50257,
                          max_seq=1024, source=_GPT2.format(name="gpt2-xl")),
        TransformerConfig("llama2-7b", "llama", layers=32, hidden=4096, heads=32,
                          vocab=32000, ffn=11008, max_seq=4096,
                          source=_LLAMA2.format(size="7b")),
        TransformerConfig("llama2-13b", "llama", layers=40, hidden=5120, heads=40,
                          vocab=32000, ffn=13824, max_seq=4096,
                          source=_LLAMA2.format(size="13b")),
        TransformerConfig("llama2-70b", "llama", layers=80, hidden=8192, heads=64,
                          kv_heads=8, vocab=32000, ffn=28672, max_seq=4096,
                          source=_LLAMA2.format(size="70b")),
        TransformerConfig("llama3-8b", "llama", layers=32, hidden=4096, heads=32,
                          kv_heads=8, vocab=128256, ffn=14336, max_seq=8192,
                          rope_theta=500000.0, source=_LLAMA3.format(size="8B")),
        TransformerConfig("llama3-70b", "llama", layers=80, hidden=8192, heads=64,
                          kv_heads=8, vocab=128256, ffn=28672, max_seq=8192,
                          rope_theta=500000.0, source=_LLAMA3.format(size="70B")),
        TransformerConfig("llama3-405b", "llama", layers=126, hidden=16384, heads=128,
                          kv_heads=8, vocab=128256, ffn=53248, max_seq=8192,
                          rope_theta=500000.0, source=_LLAMA3.format(size="405B")),
    )
}


def is_preset(name: str) -> bool:
    return name in PRESETS


def preset(name: str) -> TransformerConfig:
    """The named preset; an unknown name raises ``ValueError`` naming the close ones."""
    try:
        return PRESETS[name]
    except KeyError:
        close = difflib.get_close_matches(name.lower(), PRESETS, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown language-model preset {name!r}{hint} "
                         f"({', '.join(PRESETS)})") from None
