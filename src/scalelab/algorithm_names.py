"""The names of computation configurations, without torch (the plan reads them too).

A configuration is ``default`` or a ``+``-joined set of :data:`OPTIONS`
(:mod:`scalelab.profiler.algorithms` applies them). The plan names the precision a target
computes in (``bf16``, ``fp16``, ``tf32``, ``fp32``); :func:`run_name` turns either into the
``--algorithm`` a run takes.
"""

from __future__ import annotations

from scalelab.errors import UsageError

OPTIONS = ("channels_last", "bf16_autocast", "fp16_autocast", "cudnn_benchmark", "tf32",
           "fp32_strict")

#: the run configuration that computes in a precision the plan names
_BY_PRECISION = {"bf16": "bf16_autocast", "fp16": "fp16_autocast", "tf32": "tf32",
                 "fp32": "default"}


def parse(name: str) -> frozenset[str]:
    """'channels_last+bf16_autocast' -> its options; 'default' -> none; UsageError for an
    unknown option or two that contradict each other."""
    if name == "default":
        return frozenset()
    opts = frozenset(name.split("+"))
    unknown = sorted(opts - set(OPTIONS))
    if unknown:
        raise UsageError(f"unknown computation option(s) {', '.join(unknown)} "
                         f"(known: default, {', '.join(OPTIONS)})")
    if {"bf16_autocast", "fp16_autocast"} <= opts:
        raise UsageError(f"{name!r}: choose one of bf16_autocast and fp16_autocast")
    if {"tf32", "fp32_strict"} <= opts:
        raise UsageError(f"{name!r}: choose one of tf32 and fp32_strict")
    return opts


def is_name(text: str) -> bool:
    """Whether ``text`` is ``default`` or a ``+``-joined set of known options."""
    return text == "default" or (bool(text) and set(text.split("+")) <= set(OPTIONS))


def run_name(label: str | None) -> str | None:
    """The ``--algorithm`` for a recommendation's configuration label, None for the defaults.

    ``"channels_last+bf16_autocast"`` stays as it is; a precision label such as
    ``"bf16 (the profile's choice)"`` becomes ``bf16_autocast``; a label that says it is
    PyTorch's default needs no option.
    """
    if not label or "PyTorch's default" in label:
        return None
    head = label.split(" ", 1)[0]
    name = head if is_name(head) else _BY_PRECISION.get(head)
    return None if name in (None, "default") else name
