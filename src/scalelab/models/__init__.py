"""Built-in model families: decoder-only transformers (GPT-2 and Llama styles).

- :mod:`~scalelab.models.config`: :class:`TransformerConfig`, a model's hyperparameters
  and parameter count (no torch);
- :mod:`~scalelab.models.presets`: named models with their published sizes and sources;
- :mod:`~scalelab.models.model`: the PyTorch module (imports torch).
"""

from scalelab.models.config import TransformerConfig
from scalelab.models.presets import PRESETS, is_preset, preset

__all__ = ["PRESETS", "TransformerConfig", "is_preset", "preset"]
