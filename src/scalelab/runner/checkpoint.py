"""Checkpoints: atomic files, loaded with ``weights_only=True``, checked against the model.

Each owner of state writes ``<dir>/<owner>-step<NNNNNNNN>.pt`` (servers ``ps<k>``, the
all-reduce job's rank 0 ``ddp``): parameters, optimizer state and the step, through a
temporary file and a rename, keeping the newest two. A resumed run starts from the
newest step that every owner has, so a job killed while some servers were still writing
resumes consistently. Every file carries the model's identity (model, shapes, optimizer,
layout); a checkpoint of another model is a :class:`~scalelab.errors.UsageError`.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import torch

from scalelab.algorithm_names import parse
from scalelab.errors import UsageError
from scalelab.results import write_text_atomic

KEEP = 2
_NAME = re.compile(r"^(?P<owner>[a-z]+\d*)-step(?P<step>\d{8})\.pt$")


def identity(cfg, model) -> dict:
    """What must match for a checkpoint to continue this run."""
    spec = cfg.workload
    d = {
        "model": spec.model,
        "input_shape": list(spec.input_shape),
        "num_classes": spec.num_classes,
        "optimizer": spec.optimizer,
        "tensors": [[n, list(p.shape)] for n, p in model.named_parameters() if p.requires_grad],
        "architecture": cfg.architecture,
    }
    if cfg.architecture == "ps":
        d["layout"] = [cfg.ps, cfg.partition, cfg.piece_bytes or 0]
        if "channels_last" in parse(cfg.algorithm):  # pieces cover NHWC memory order
            d["memory_format"] = "channels_last"
    if cfg.architecture == "fsdp":  # ZeRO-1's optimizer shards are placed per rank
        d["layout"] = [cfg.shard_level, cfg.workers if cfg.shard_level == 1 else 0]
    return d


def path_for(directory: str, owner: str, step: int) -> Path:
    return Path(directory) / f"{owner}-step{step:08d}.pt"


def steps_of(directory: str, owner: str) -> set[int]:
    d = Path(directory)
    if not d.is_dir():
        return set()
    found = set()
    for f in d.iterdir():
        m = _NAME.match(f.name)
        if m and m.group("owner") == owner:
            found.add(int(m.group("step")))
    return found


def save(directory: str, owner: str, step: int, payload: dict) -> Path:
    buf = io.BytesIO()
    torch.save(payload, buf)
    path = write_text_atomic(path_for(directory, owner, step), buf.getvalue())
    for old in sorted(steps_of(directory, owner))[:-KEEP]:
        path_for(directory, owner, old).unlink(missing_ok=True)
    return path


def load(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a damaged or foreign file
        first = (str(e).strip().splitlines() or [""])[0]
        why = type(e).__name__ + (f": {first}" if first and len(first) <= 120 else "")
        raise UsageError(f"{path}: not a readable scalelab checkpoint ({why}); move it "
                         "away to resume from the one before it") from None


def check_identity(path: Path, payload: dict, expected: dict) -> None:
    found = payload.get("identity") if isinstance(payload, dict) else None
    if found == expected:
        return
    if not isinstance(found, dict):
        raise UsageError(f"{path}: not a scalelab checkpoint")
    diffs = [k for k in expected if found.get(k) != expected[k]]
    what = ", ".join(
        f"{k} {found.get(k)!r} here vs {expected[k]!r}" if k != "tensors"
        else "parameter shapes differ" for k in diffs[:3])
    raise UsageError(f"checkpoint {path} is from another model or layout: {what}")


def check_directory(directory: str, expected: dict) -> None:
    """Reject a checkpoint folder whose newest file belongs to another model (fast pre-check)."""
    d = Path(directory)
    if not d.is_dir():
        return
    files = sorted((f for f in d.iterdir() if _NAME.match(f.name)), key=lambda f: f.name)
    if files:
        path = files[-1]
        check_identity(path, load(path), expected)


#: Which architecture writes which checkpoints: ``ps<k>-step*.pt`` (servers),
#: ``ddp-step*.pt`` (all-reduce rank 0), ``fsdp-step*/`` (every sharded rank).
def architectures_in(directory: str) -> set[str]:
    """The architectures whose checkpoints ``directory`` holds."""
    d = Path(directory)
    if not d.is_dir():
        return set()
    found = set()
    for f in d.iterdir():
        m = _NAME.match(f.name)
        if m:
            found.add("allreduce" if m.group("owner") == "ddp" else "ps")
        elif f.is_dir() and re.match(r"^fsdp-step\d{8}$", f.name):
            found.add("fsdp")
    return found


def check_folder(cfg) -> None:
    """Refuse, before any rank starts, a --checkpoint-dir that is not a folder, and a
    --resume over another architecture's checkpoints (it would start from step 0 beside
    them)."""
    d = Path(cfg.checkpoint_dir)
    if d.exists() and not d.is_dir():
        raise UsageError(f"--checkpoint-dir {d}: not a folder (give a folder, or a path that "
                         "does not exist yet)")
    if not cfg.resume:
        return
    found = architectures_in(cfg.checkpoint_dir)
    if found and cfg.architecture not in found:
        other = sorted(found)[0]
        raise UsageError(f"--resume: {d} holds checkpoints of --architecture {other}, not "
                         f"{cfg.architecture}: resume with --architecture {other}, or give "
                         "another --checkpoint-dir")
