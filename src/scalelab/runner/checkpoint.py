"""Checkpoints: atomic writes, ``weights_only=True`` loads, a model identity check.

Parameter-server runs: server k writes ``server-<k>-step-<s>.pt`` (its shard, the optimizer
state of every piece, the step); all-reduce runs: rank 0 writes ``ddp-step-<s>.pt`` (model
and optimizer state). Each file carries the run's identity (model, shapes, architecture,
partition); the two newest files per writer are kept, so a run killed while some servers are
writing resumes from the newest step every writer completed.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import torch

from scalelab.errors import UsageError
from scalelab.results import write_text_atomic

KEEP = 2


def identity(config, shapes: list[tuple[int, ...]]) -> dict:
    w = config.workload
    return {
        "model": w.model,
        "input_shape": list(w.input_shape),
        "num_classes": w.num_classes,
        "optimizer": w.optimizer,
        "shapes": [list(s) for s in shapes],
        "architecture": config.architecture,
        "ps": config.ps,
        "partition": config.partition if config.architecture == "ps" else None,
        "piece_bytes": config.piece_bytes if config.architecture == "ps" else None,
    }


def _writer_names(config) -> list[str]:
    if config.architecture == "ps":
        return [f"server-{k}" for k in range(config.ps)]
    return ["ddp"]


def path_for(directory: str, writer: str, step: int) -> Path:
    return Path(directory) / f"{writer}-step-{step:08d}.pt"


def save(directory: str, writer: str, step: int, state: dict) -> Path:
    buf = io.BytesIO()
    torch.save(state, buf)
    path = write_text_atomic(path_for(directory, writer, step), buf.getvalue())
    old = sorted(_steps_of(directory, writer))[:-KEEP]
    for s in old:
        try:
            os.unlink(path_for(directory, writer, s))
        except OSError:
            pass
    return path


def _steps_of(directory: str, writer: str) -> set[int]:
    pat = re.compile(re.escape(writer) + r"-step-(\d{8})\.pt$")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return set()
    return {int(m.group(1)) for n in names if (m := pat.match(n))}


def load(directory: str, writer: str, step: int) -> dict:
    path = path_for(directory, writer, step)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a corrupt or foreign file is the user's input
        raise UsageError(f"{path}: not a readable scalelab checkpoint: {e}") from None


def resume_step(config, shapes: list[tuple[int, ...]]) -> int:
    """The newest step every writer checkpointed, after checking the files' identity."""
    d = config.checkpoint_dir
    writers = _writer_names(config)
    common = set.intersection(*(_steps_of(d, w) for w in writers))
    if not common:
        found = sorted(n for n in os.listdir(d)) if os.path.isdir(d) else []
        hint = f" (found {', '.join(found[:4])})" if found else ""
        raise UsageError(
            f"--resume: no complete checkpoint for this architecture in {d}{hint}"
        )
    step = max(common)
    want = identity(config, shapes)
    for w in writers:
        got = load(d, w, step).get("identity")
        if got != want:
            diff = [k for k in want if not got or got.get(k) != want[k]]
            raise UsageError(
                f"{path_for(d, w, step)}: checkpoint of another run "
                f"(differs in {', '.join(diff) or 'format'}: "
                f"{got.get(diff[0]) if got and diff else '?'} vs {want[diff[0]] if diff else '?'})"
            )
    if step >= config.steps:
        raise UsageError(f"--resume: the checkpoint is at step {step}, --steps {config.steps}: "
                         "nothing left to run")
    return step
