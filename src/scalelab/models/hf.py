"""A Hugging Face ``config.json`` read as a :class:`~scalelab.models.config.TransformerConfig`.

``hf:PATH`` names a model by its configuration file (or a folder holding ``config.json``),
read with :mod:`json` alone: no ``transformers``, no weights. The keys read, by family:

- Llama, Mistral, Qwen2 (``model_type`` llama, mistral, qwen2, or any file with
  ``hidden_size``): ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``,
  ``num_attention_heads``, ``num_key_value_heads`` (default: the attention heads),
  ``vocab_size``, ``tie_word_embeddings`` (default false), ``max_position_embeddings``
  (default 2048), ``rms_norm_eps``, ``rope_theta``; built in the ``llama`` style (RMSNorm,
  SwiGLU, rotary positions, grouped-query attention);
- GPT-2 (``model_type`` gpt2, or a file with ``n_embd``): ``n_embd``, ``n_layer``,
  ``n_head``, ``n_inner`` (null: 4 x ``n_embd``), ``vocab_size``, ``n_positions`` (or
  ``n_ctx``), ``layer_norm_epsilon``, ``tie_word_embeddings`` (default true).

What the ``llama`` style leaves out: Qwen2's biases on the q, k and v projections (3 vectors
per layer, 0.005% of Qwen2-7B's parameters) and Mistral's sliding-window attention
(attention here is causal over the whole sequence: the parameters are the same, attention's
FLOPs are those of a full window). A ``head_dim`` other than hidden / heads is refused: the
module derives the head width from those two.

Every problem with the file (missing, not JSON, a key absent or not a positive integer,
hidden not divisible by the heads) is one :class:`~scalelab.errors.UsageError` line.
"""

from __future__ import annotations

import json
from pathlib import Path

from scalelab.errors import UsageError
from scalelab.models.config import TransformerConfig

PREFIX = "hf:"

# (our field, the Llama-family key, the GPT-2 key)
_KEYS = (("hidden", "hidden_size", "n_embd"),
         ("layers", "num_hidden_layers", "n_layer"),
         ("heads", "num_attention_heads", "n_head"),
         ("vocab", "vocab_size", "vocab_size"))


def is_hf(model: str) -> bool:
    return isinstance(model, str) and model.startswith(PREFIX)


def config_path(model: str) -> Path:
    """The ``config.json`` that ``hf:PATH`` names (PATH itself, or PATH/config.json)."""
    path = Path(model[len(PREFIX):]).expanduser()
    return path / "config.json" if path.is_dir() else path


def read_json(model: str) -> dict:
    path = config_path(model)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{model}: no such file {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{model}: {path} is not a readable JSON file: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{model}: {path} holds {type(data).__name__}, not a JSON object")
    return data


def _positive(data: dict, key: str, model: str, default=None) -> int:
    v = data.get(key, default)
    if v is None:
        raise UsageError(f"{model}: config.json has no {key}")
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise UsageError(f"{model}: config.json's {key} must be a positive integer, got {v!r}")
    return v


def _number(data: dict, key: str, model: str, default: float) -> float:
    v = data.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise UsageError(f"{model}: config.json's {key} must be a positive number, got {v!r}")
    return float(v)


def from_config(data: dict, model: str) -> TransformerConfig:
    """The transformer a parsed ``config.json`` describes (``model`` names it in errors)."""
    gpt2 = data.get("model_type") == "gpt2" or ("n_embd" in data and "hidden_size" not in data)
    col = 2 if gpt2 else 1
    kw: dict = {}
    for keys in _KEYS:
        kw[keys[0]] = _positive(data, keys[col], model)
    if gpt2:
        inner = data.get("n_inner")
        kw["ffn"] = 4 * kw["hidden"] if inner is None else _positive(data, "n_inner", model)
        kw["max_seq"] = _positive(data, "n_positions" if "n_positions" in data else "n_ctx",
                                  model, 1024)
        kw["norm_eps"] = _number(data, "layer_norm_epsilon", model, 1e-5)
        tied = data.get("tie_word_embeddings", True)
    else:
        kw["ffn"] = _positive(data, "intermediate_size", model)
        kw["kv_heads"] = _positive(data, "num_key_value_heads", model, kw["heads"])
        kw["max_seq"] = _positive(data, "max_position_embeddings", model, 2048)
        kw["norm_eps"] = _number(data, "rms_norm_eps", model, 1e-5)
        kw["rope_theta"] = _number(data, "rope_theta", model, 10000.0)
        tied = data.get("tie_word_embeddings", False)
        head_dim = data.get("head_dim")
        if head_dim is not None and kw["hidden"] % kw["heads"] == 0 \
                and head_dim != kw["hidden"] // kw["heads"]:
            raise UsageError(f"{model}: head_dim {head_dim} is not hidden_size / "
                             f"num_attention_heads = {kw['hidden'] // kw['heads']} (not built)")
    if not isinstance(tied, bool):
        raise UsageError(f"{model}: config.json's tie_word_embeddings must be true or false, "
                         f"got {tied!r}")
    hidden_key = _KEYS[0][col]
    if kw["hidden"] % kw["heads"]:
        raise UsageError(f"{model}: {hidden_key} {kw['hidden']} is not divisible by "
                         f"{kw['heads']} attention heads")
    try:
        return TransformerConfig(model, "gpt2" if gpt2 else "llama", tied=tied,
                                 source=f"Hugging Face config.json at {config_path(model)}", **kw)
    except ValueError as e:
        raise UsageError(f"{model}: {e}") from None


def load(model: str) -> TransformerConfig:
    """The transformer of ``hf:PATH``."""
    if not is_hf(model):
        raise ValueError(f"not an hf: model name: {model!r}")
    return from_config(read_json(model), model)
