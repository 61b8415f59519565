"""The workload: a model spec -> its module (built for real or on meta tensors), its input.

A :class:`WorkloadSpec` names everything that defines one training step: the model (a
torchvision classification model name, a built-in language model: a preset of
:mod:`scalelab.models.presets` or ``hf:PATH`` to a Hugging Face ``config.json``, or
``package.module:factory`` for the user's own), the per-sample input shape, the number of
classes, the loss and the optimizer. Everything else in scalelab (profiler, runner,
planner) takes a spec and never re-derives these.

A language model takes token ids (``input="tokens"``): one sample is a sequence of
``seq_len`` ids, ``input_shape`` is ``(seq_len,)``, ``num_classes`` is the vocabulary, a
synthetic batch is ids drawn uniformly from the vocabulary and its target is the same ids,
and the loss is next-token cross-entropy (:func:`scalelab.models.model.next_token_loss`:
the logits at positions 0..S-2 against the ids at 1..S-1). A built-in model carries its
:class:`~scalelab.models.config.TransformerConfig` in the spec (``transformer``), so a rank
never reads ``hf:PATH`` again; ``layers`` makes a reduced copy (the same widths, fewer
blocks). A user's factory takes tokens when told (``input="tokens"``) or when its first
layer is an ``nn.Embedding`` (:func:`detect_tokens`); its vocabulary is that embedding's.

:func:`scalelab.opcount.describe` derives what planning needs from the model alone (the
parameter count, ``param_bytes``, each parameter tensor's bytes and the FLOPs per sample)
into a :class:`WorkloadInfo`; this module builds the model it describes (on meta tensors
where the model allows it: :func:`scalelab.meta_build.meta_model`) and checks it takes its input
(:func:`check_workload`).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from scalelab import token_models
from scalelab._lazy import LazyModule
from scalelab.errors import UsageError
from scalelab.meta_build import meta_model
from scalelab.models.config import TransformerConfig

# imported on first use: the spec and the model's description are read without torch
torch = LazyModule("torch")
nn = LazyModule("torch.nn")

#: An image model's default input shape
IMAGE_SHAPE = (3, 224, 224)

# Models whose auxiliary classifiers are switched off: the step trains the main head only,
# so every parameter gets a gradient (DDP and the parameter server need that).
_AUX_MODELS = {"googlenet", "inception_v3"}


def parse_input_shape(text: str | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """'3,224,224' -> (3, 224, 224); every dimension a positive integer."""
    if isinstance(text, (tuple, list)):
        parts = [str(v) for v in text]
    else:
        parts = [p.strip() for p in str(text).replace("x", ",").split(",")]
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise UsageError(
            f"malformed input shape {text!r}: expected positive integers like 3,224,224"
        ) from None
    if not dims or any(d <= 0 for d in dims):
        raise UsageError(f"malformed input shape {text!r}: every dimension must be > 0")
    return dims


@lru_cache(maxsize=1)
def torchvision_models() -> tuple[str, ...]:
    """Names of torchvision's classification models."""
    import torchvision

    return tuple(sorted(torchvision.models.list_models(module=torchvision.models)))


def _import_from_cwd(module_name: str):
    """Import a module; the working directory counts as a source root (as ``python -m``)."""
    import os
    import sys

    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    return importlib.import_module(module_name)


def resolve_factory(model: str):
    """Return ``factory(num_classes) -> nn.Module`` for a model name or import path."""
    if ":" in model:
        module_name, _, attr = model.partition(":")
        try:
            module = _import_from_cwd(module_name)
        except Exception as e:  # noqa: BLE001 - any import failure is the user's input
            raise UsageError(
                f"model factory {model!r}: cannot import {module_name!r}: {e}"
            ) from None
        factory = getattr(module, attr, None)
        if factory is None or not callable(factory):
            raise UsageError(f"model factory {model!r}: {module_name!r} has no callable {attr!r}")
        try:
            accepts_classes = "num_classes" in inspect.signature(factory).parameters
        except (TypeError, ValueError):
            accepts_classes = False

        def build_user(num_classes: int) -> nn.Module:
            return factory(num_classes=num_classes) if accepts_classes else factory()

        return build_user

    names = torchvision_models()
    if model not in names:
        close = difflib.get_close_matches(model.lower(), names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UsageError(
            f"unknown model {model!r}{hint} (a torchvision classification model, "
            "or package.module:factory)"
        )

    def build_tv(num_classes: int) -> nn.Module:
        import torchvision

        kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
        if model in _AUX_MODELS:
            kwargs.update(aux_logits=False, init_weights=True)
        return torchvision.models.get_model(model, **kwargs)

    return build_tv


@dataclass(frozen=True)
class WorkloadSpec:
    """What defines one training step. Validated on creation."""

    model: str
    input_shape: tuple[int, ...] = ()   # (): 3,224,224 for an image model, (seq_len,) for tokens
    num_classes: int = 1000
    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    loss: str = "cross_entropy"
    input: str = ""          # image | tokens; "": tokens for a preset or hf:PATH, else image
    seq_len: int = 0         # tokens per sequence; 0: min(1024, the model's positions)
    layers: int = 0          # a built-in language model's reduced copy: this many blocks
    transformer: TransformerConfig | None = None   # a built-in language model's shape
    token_dtype: str = "auto"   # ids in a token file: uint16, uint32, auto (by vocabulary)

    def __post_init__(self):
        if self.num_classes <= 0:
            raise UsageError(f"--num-classes must be > 0, got {self.num_classes}")
        if self.optimizer not in ("sgd", "adam"):
            raise UsageError(f"unknown optimizer {self.optimizer!r} (sgd or adam)")
        if self.loss != "cross_entropy":
            raise UsageError(f"unknown loss {self.loss!r} (cross_entropy)")
        if not 0 < self.lr < math.inf:
            raise UsageError(f"--lr must be > 0 and finite, got {self.lr}")
        if self.token_dtype not in token_models.TOKEN_DTYPES:
            raise UsageError(f"unknown --token-dtype {self.token_dtype!r} "
                             f"({', '.join(token_models.TOKEN_DTYPES)})")
        if self.input not in ("", *token_models.INPUTS):
            raise UsageError(f"unknown --input {self.input!r} (image or tokens)")
        for key in ("seq_len", "layers"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise UsageError(f"--{key.replace('_', '-')} must be a positive integer, "
                                 f"got {v!r}")
        lm = self.transformer
        if isinstance(lm, dict):
            lm = TransformerConfig.from_dict(lm)
        if lm is None:
            lm = token_models.built_in_lm(self.model)
        kind = self.input or ("tokens" if lm is not None else "image")
        if lm is not None and kind == "image":
            raise UsageError(f"model {self.model!r} is a language model: it takes token ids "
                             "(--input tokens, --seq-len S), not images")
        if self.layers:
            if lm is None or not self.built_in:
                raise UsageError("--layers makes a reduced copy of a built-in language model "
                                 f"(a preset or hf:PATH), not of {self.model!r}")
            if lm.layers != self.layers:
                lm = lm.with_layers(self.layers)
        object.__setattr__(self, "transformer", lm)
        object.__setattr__(self, "input", kind)
        if kind == "tokens":
            self._resolve_tokens(lm)
        else:
            if self.seq_len:
                raise UsageError(f"--seq-len is for a model that takes token ids; "
                                 f"{self.model!r} takes images (--input-shape)")
            object.__setattr__(self, "input_shape",
                               parse_input_shape(IMAGE_SHAPE if isinstance(
                                   self.input_shape, (tuple, list)) and not self.input_shape
                                   else self.input_shape))

    def _resolve_tokens(self, lm: TransformerConfig | None) -> None:
        """input_shape (seq_len,) and num_classes the vocabulary, checked."""
        seq = token_models.seq_len_of(self.model, tuple(self.input_shape), self.seq_len, lm)
        object.__setattr__(self, "seq_len", seq)
        object.__setattr__(self, "input_shape", (seq,))
        if lm is not None:
            object.__setattr__(self, "num_classes", lm.vocab)

    @property
    def named(self) -> bool:
        """A model by name (torchvision, or a preset), not the user's ``package.module:factory``
        or ``hf:PATH`` (whose contents can change under the same name)."""
        return ":" not in self.model

    @property
    def built_in(self) -> bool:
        """A language model scalelab builds itself (a preset or ``hf:PATH``)."""
        return token_models.is_built_in(self.model)

    @property
    def tokens(self) -> bool:
        """The model takes token ids (a language model)."""
        return self.input == "tokens"

    @property
    def vocab(self) -> int:
        """A language model's vocabulary (its classes)."""
        return self.num_classes

    @property
    def tokens_per_sample(self) -> int:
        """Tokens in one sample: seq_len for a language model, 0 for an image model."""
        return self.seq_len if self.tokens else 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["input_shape"] = list(self.input_shape)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkloadSpec:
        keys = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in keys})

    def build_model(self, seed: int | None = 0) -> nn.Module:
        """A fresh model; with a seed the initial parameters are the same in every process."""
        if self.built_in:
            from scalelab.models.model import build

            return build(self.transformer, seed)
        factory = resolve_factory(self.model)
        if seed is not None:
            torch.manual_seed(seed)
        try:
            module = factory(self.num_classes)
        except UsageError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's factory failed
            raise UsageError(f"model {self.model!r}: the factory failed: {e}") from None
        if not isinstance(module, nn.Module):
            raise UsageError(
                f"model {self.model!r}: the factory returned {type(module).__name__}, "
                "not a torch.nn.Module"
            )
        return module

    def optimizer_class(self) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
        """The workload's optimizer class and its arguments (also what
        ``ZeroRedundancyOptimizer`` is given to build each rank's shard of it)."""
        if self.optimizer == "adam":
            return torch.optim.Adam, {"lr": self.lr}
        return torch.optim.SGD, {"lr": self.lr, "momentum": self.momentum}

    def make_optimizer(self, params, fused: bool = False) -> torch.optim.Optimizer:
        """The workload's optimizer; ``fused``: one kernel per pass over all parameters (the
        parameter servers' flat pieces), the same arithmetic as the default loops."""
        cls, kw = self.optimizer_class()
        return cls(params, **kw, **({"fused": True} if fused else {}))

    def loss_fn(self) -> nn.Module:
        """Cross-entropy over classes; next-token cross-entropy for a language model."""
        if self.tokens:
            from scalelab.models.model import NextTokenLoss

            return NextTokenLoss()
        return nn.CrossEntropyLoss()

    def example_input(self, batch_size: int, device: str | torch.device = "cpu",
                      empty: bool = False) -> torch.Tensor:
        """A batch of inputs of the right shape and dtype: token ids (zeros) or floats
        (zeros, or uninitialized with ``empty``)."""
        shape = (batch_size, *self.input_shape)
        if self.tokens:
            return torch.zeros(shape, dtype=torch.long, device=device)
        return (torch.empty if empty else torch.zeros)(shape, device=device)

    def example_target(self, batch_size: int, device: str | torch.device = "cpu"):
        """Targets the loss takes for :meth:`example_input`: the ids, or one label each."""
        shape = (batch_size, *self.input_shape) if self.tokens else (batch_size,)
        return torch.zeros(shape, dtype=torch.long, device=device)

    def synthetic_batch(
        self, batch_size: int, seed: int = 0, device: str | torch.device = "cpu",
        generator=None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reproducible random batch (inputs, integer labels): for a language model ids
        drawn uniformly from the vocabulary, the target the same ids. ``generator``: one of
        ``device`` (seeded here), to draw there instead of on the CPU."""
        g = generator.manual_seed(seed) if generator is not None \
            else torch.Generator().manual_seed(seed)
        where = {"device": device} if generator is not None else {}
        if self.tokens:
            x = torch.randint(0, self.vocab, (batch_size, self.seq_len), generator=g, **where)
            x = x.to(device)
            return x, x
        x = torch.randn((batch_size, *self.input_shape), generator=g, **where)
        y = torch.randint(0, self.num_classes, (batch_size,), generator=g, **where)
        return x.to(device), y.to(device)


def logits_of(output: Any) -> torch.Tensor:
    """The main output of a model (models may return namedtuples with auxiliary heads)."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, (tuple, list)) and output:
        return output[0]
    raise TypeError(f"model returned {type(output).__name__}, expected a tensor")


@dataclass(frozen=True)
class WorkloadInfo:
    """What the planner needs to know about a model, derived by
    :func:`scalelab.opcount.describe`."""

    param_count: int
    param_bytes: int
    tensor_bytes: list[int] = field(default_factory=list)
    tensor_names: list[str] = field(default_factory=list)
    flops_per_sample: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _forward_and_loss(spec: WorkloadSpec, model: nn.Module, device: str) -> None:
    """The model's forward pass at batch 2 on ``device``, then the loss of its output.

    The loss runs on CPU zeros of the output's shape and dtype, which it accepts or refuses
    as it would the output itself: on meta tensors ``cross_entropy``'s ``log_softmax`` runs
    PyTorch's Python decomposition, whose first call imports ``torch._dynamo`` (1.4 s of a
    ``scalelab run`` here, which otherwise never needs it)."""
    x = spec.example_input(2, device)
    with torch.no_grad():
        out = logits_of(model.train()(x))
        spec.loss_fn()(torch.zeros(out.shape, dtype=out.dtype), spec.example_target(2))


@lru_cache(maxsize=32)
def check_workload(spec: WorkloadSpec) -> None:
    """Raise a one-line :class:`UsageError` unless ``spec``'s model takes its input shape.

    A forward pass and the loss at batch 2 (BatchNorm refuses batch 1 in training mode) on
    meta tensors: shapes are checked, nothing is allocated or computed, so this runs before
    any process starts (``run --input-shape 3,32`` for a model that wants C,H,W). A model
    that cannot run on meta tensors is checked on CPU instead, where a failure is real.
    """
    try:
        _forward_and_loss(spec, meta_model(spec), "meta")
        return
    except UsageError:
        raise
    except Exception:  # noqa: BLE001 - a shape error, or an op without a meta kernel
        pass
    try:
        _forward_and_loss(spec, spec.build_model(seed=None), "cpu")
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - the model rejects this input
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        if spec.tokens:
            raise UsageError(f"model {spec.model!r} does not take --seq-len {spec.seq_len} "
                             f"token ids (vocabulary {spec.vocab}): {first}") from None
        shape = ",".join(map(str, spec.input_shape))
        hint = ""
        if "indices" in first or "Long, Int" in first:
            hint = " (it wants integer ids: a language model takes --input tokens --seq-len S)"
        raise UsageError(f"model {spec.model!r} does not take --input-shape {shape} "
                         f"(one sample's shape, without the batch){hint}: {first}") from None


def detect_tokens(spec: WorkloadSpec, told: bool = False) -> WorkloadSpec:
    """``spec`` made a token model where a user's factory takes token ids: when ``told``
    (``--input tokens``) or when the model's first layer is an ``nn.Embedding``
    (:func:`scalelab.token_models.first_embedding`). Its vocabulary is that embedding's
    (any embedding's when told; ``num_classes`` when it has none); a model that keeps a
    :class:`TransformerConfig` as ``cfg`` gives its positions too. A built-in model or an
    image model not told otherwise is returned as it is."""
    from dataclasses import replace

    if spec.built_in or (spec.tokens and not told and spec.transformer is not None):
        return spec
    try:
        model = meta_model(spec)
    except UsageError:
        raise
    except Exception:  # noqa: BLE001 - not buildable on meta: build it for real
        model = spec.build_model(seed=None)
    emb = token_models.first_embedding(model)
    if emb is None and not told:
        return spec
    if emb is None:
        emb = token_models.any_embedding(model)
    cfg = getattr(model, "cfg", None)
    return replace(spec, input="tokens", input_shape=(),
                   num_classes=emb.num_embeddings if emb is not None else spec.num_classes,
                   transformer=cfg if isinstance(cfg, TransformerConfig) else None)
