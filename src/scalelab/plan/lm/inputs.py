"""What a language-model plan starts from: the model, the sequence, the batch, the budget.

A plan of a language model needs no measurement: the model's shape (a preset such as
``llama3-70b`` or a Hugging Face ``config.json`` as ``hf:PATH``) gives its FLOPs and memory,
and the step model of :mod:`scalelab.plan.lm.step` estimates each layout on the target.
A workload file names the model and may add a measured step::

    model = "llama3-8b"     # a preset, or "hf:path/to/config.json"
    seq_len = 8192          # tokens per sequence (default: the model's positions)
    global_batch = 512      # sequences per optimizer step (default: about 4M tokens)
    batch_size = 2          # sequences per GPU per forward (the micro-batch)
    tokens = "2T"           # a token budget to train (optional)
    step_s = 1.9            # optional: one step measured at batch_size on `device`
    device = "H100-SXM"     # where step_s was measured

Without ``step_s`` (and ``device``) the step is the compute model's estimate for the
target, marked as an estimate with its band. With them, the estimate's compute is scaled by
measured / estimated on that device (one GPU, micro-batch ``batch_size``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalelab.errors import UsageError, is_number
from scalelab.models.config import TransformerConfig

#: the default global batch in tokens: Llama 2's 4M tokens per step (Touvron et al. 2023,
#: "Llama 2: Open Foundation and Fine-Tuned Chat Models", section 2.2: "a global batch-size
#: of 4M tokens")
DEFAULT_BATCH_TOKENS = 4 * 2**20

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_TOKENS = re.compile(r"^\s*([0-9][0-9_,]*\.?[0-9]*(?:e[+-]?[0-9]+)?)\s*([kmbgtp]?)\s*$", re.I)


def parse_tokens(text: Any, option: str = "--tokens") -> float:
    """A token count: ``2T``, ``300B``, ``1.5e12``, ``500M``, ``2,000,000`` (SI suffixes:
    K 1e3, M 1e6, B/G 1e9, T 1e12). ``UsageError`` unless a positive, finite count."""
    if is_number(text):
        value = float(text)
    else:
        m = _TOKENS.match(str(text))
        if not m:
            raise UsageError(f"{option} must be a positive count of tokens (2T, 300B, 1e12), "
                             f"got {text!r}")
        value = float(m.group(1).replace(",", "").replace("_", "")) * _SUFFIX[m.group(2).lower()]
    if not (math.isfinite(value) and value >= 1):
        raise UsageError(f"{option} must be a positive count of tokens (2T, 300B, 1e12), "
                         f"got {text!r}")
    return value


def is_lm_name(name: Any) -> bool:
    """Whether ``name`` names a language model the planner can size without building it:
    a preset or ``hf:PATH``."""
    from scalelab.models.presets import is_preset

    return isinstance(name, str) and (is_preset(name) or name.startswith("hf:"))


def resolve_model(name: str) -> TransformerConfig:
    """The transformer a name stands for (a preset, or ``hf:PATH``), as one line on error."""
    from scalelab.models.presets import is_preset, preset

    try:
        if is_preset(name):
            return preset(name)
        if name.startswith("hf:"):
            from scalelab.models import hf

            return hf.load(name)
        return preset(name)  # the unknown-preset line, with close names
    except UsageError:
        raise
    except (ValueError, OSError, KeyError, TypeError) as e:
        raise UsageError(str(e)) from None


@dataclass(frozen=True)
class LMWorkload:
    """A language model to plan: its shape, sequence length, batch and budget."""

    model: TransformerConfig
    """The transformer."""
    name: str
    """As the user named it (``llama3-70b``, ``hf:PATH``): what the launch line trains."""
    seq_len: int
    """Tokens per sequence."""
    global_batch: int | None = None
    """Sequences per optimizer step (None: about :data:`DEFAULT_BATCH_TOKENS` tokens)."""
    micro_batch: int | None = None
    """Sequences per GPU per forward, when fixed (a workload file's ``batch_size``)."""
    tokens: float | None = None
    """A token budget to train."""
    step_s: float | None = None
    """One step measured on one ``device`` at micro-batch ``micro_batch``."""
    device: str | None = None
    """Where ``step_s`` was measured (catalog name)."""
    path: str | None = None
    """The workload file, when there is one."""

    def __post_init__(self):
        where = f"{self.path}: " if self.path else ""
        s = self.seq_len
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise UsageError(f"{where}--seq-len must be an integer >= 1, got {s!r}")
        if s > self.model.max_seq:
            raise UsageError(f"{where}--seq-len {s} is beyond {self.model.name}'s "
                             f"{self.model.max_seq} positions")
        for key in ("global_batch", "micro_batch"):
            v = getattr(self, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise UsageError(f"{where}{key} must be an integer >= 1, got {v!r}")
        if (self.step_s is None) != (self.device is None):
            raise UsageError(f"{where}step_s and device go together: a step measured on a "
                             "device (omit both for the compute model's estimate)")
        if self.step_s is not None and not (is_number(self.step_s) and self.step_s > 0):
            raise UsageError(f"{where}step_s must be > 0 seconds, got {self.step_s!r}")
        if self.step_s is not None and self.micro_batch is None:
            raise UsageError(f"{where}a measured step_s needs the batch_size it was "
                             "measured at")

    def batch(self) -> int:
        """The global batch in sequences: as given, else the power of two nearest to
        :data:`DEFAULT_BATCH_TOKENS` tokens (at least one sequence)."""
        if self.global_batch is not None:
            return self.global_batch
        return max(1, 2 ** round(math.log2(DEFAULT_BATCH_TOKENS / self.seq_len)))

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.name, "config": self.model.to_dict(), "seq_len": self.seq_len,
                "global_batch": self.global_batch, "micro_batch": self.micro_batch,
                "tokens": self.tokens, "step_s": self.step_s, "device": self.device,
                "path": self.path, "param_count": self.model.param_count(),
                "non_embedding_params": self.model.non_embedding_params()}


_KNOWN = {"model", "seq_len", "global_batch", "batch_size", "tokens", "step_s", "device"}


def is_lm_workload(data: dict[str, Any]) -> bool:
    """Whether a workload file's contents describe a language model (it names a preset or
    ``hf:PATH``, or gives ``seq_len``)."""
    return is_lm_name(data.get("model")) or "seq_len" in data


def lm_workload_from_dict(data: dict[str, Any], where: str = "workload",
                          seq_len: int | None = None) -> LMWorkload:
    """A language-model workload file's contents (keys in the module docstring)."""
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} for a language model "
                         f"(known: {', '.join(sorted(_KNOWN))})")
    name = data.get("model")
    if not (isinstance(name, str) and name.strip()):
        raise UsageError(f"{where}: 'model' must name a language model (a preset such as "
                         f"llama3-8b, or hf:PATH), got {name!r}")
    if name.startswith("hf:") and not Path(name[3:]).is_absolute():
        rel = Path(where).parent / name[3:]
        if rel.exists():
            name = f"hf:{rel}"
    cfg = resolve_model(name)
    ints = {}
    for key in ("seq_len", "global_batch", "batch_size"):
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise UsageError(f"{where}: {key!r} must be an integer >= 1, got {v!r}")
        ints[key] = v
    device = data.get("device")
    if device is not None:
        from scalelab import hardware

        if not (isinstance(device, str) and device.strip()):
            raise UsageError(f"{where}: 'device' must be a name in quotes, got {device!r}")
        device = hardware.device(device).name
    step_s = data.get("step_s")
    if step_s is not None and not is_number(step_s):
        raise UsageError(f"{where}: 'step_s' must be a number of seconds, got {step_s!r}")
    tokens = data.get("tokens")
    return LMWorkload(
        model=cfg, name=name, seq_len=seq_len or ints["seq_len"] or cfg.max_seq,
        global_batch=ints["global_batch"], micro_batch=ints["batch_size"],
        tokens=parse_tokens(tokens, f"{where}: 'tokens'") if tokens is not None else None,
        step_s=None if step_s is None else float(step_s), device=device, path=where)


def load_lm_workload(path: str | Path, seq_len: int | None = None) -> LMWorkload:
    """A language-model ``workload.toml``."""
    from scalelab.results import read_toml

    return lm_workload_from_dict(read_toml(path), str(path), seq_len)
