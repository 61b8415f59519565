"""Checkpoints of tensor- and pipeline-parallel runs with ``torch.distributed.checkpoint``.

Every rank writes its own shards in parallel to ``<dir>/parallel-step<NNNNNNNN>/`` (DCP's
files and ``.metadata``); rank 0 then writes ``identity.json`` (the model, data and
optimizer the run trains, and the step), after a barrier: a folder without it is
incomplete and never resumed. The newest two are kept.

The state is keyed by fully qualified parameter names, which a pipeline keeps (a stage
is the whole model with what it does not hold removed): ``model`` merges the state dicts of
this rank's stage modules (DTensor shards under tensor parallelism and FSDP2, whole tensors
where replicated; DCP writes a replicated tensor once), ``optim`` their optimizers' state,
flattened to one entry per parameter (``StateDictOptions(flatten_optimizer_state_dict=True)``)
so that ranks holding different parameters never share a key. Loading reshards, so the
identity leaves the layout out.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from scalelab.errors import UsageError

OWNER = "parallel"
KEEP = 2


def path_for(directory: str, step: int) -> Path:
    return Path(directory) / f"{OWNER}-step{step:08d}"


def steps_of(directory: str | None) -> set[int]:
    """Steps of the complete checkpoints in ``directory`` (``identity.json`` written last)."""
    d = Path(directory) if directory else None
    if d is None or not d.is_dir():
        return set()
    out = set()
    for f in d.glob(f"{OWNER}-step*/identity.json"):
        try:
            out.add(int(f.parent.name.removeprefix(f"{OWNER}-step")))
        except ValueError:
            continue
    return out


def check_identity(path: Path, expected: dict) -> None:
    """``UsageError`` (one line) when the checkpoint at ``path`` trains something else."""
    try:
        found = json.loads((path / "identity.json").read_text())["identity"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"{path}: not a readable checkpoint (identity.json)") from None
    if found != expected:
        keys = sorted(k for k in set(found) | set(expected) if found.get(k) != expected.get(k))
        raise UsageError(f"{path}: the checkpoint is of another run ({', '.join(keys)} "
                         "differ); use another --checkpoint-dir")


def check_directory(directory: str, expected: dict) -> None:
    """Before any rank starts: the newest complete checkpoint must be of this run."""
    steps = steps_of(directory)
    if steps:
        check_identity(path_for(directory, max(steps)), expected)


def _options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def state_of(modules: list, optimizers: list) -> tuple[dict, list[tuple[set, set]]]:
    """The rank's state (``{"model": ..., "optim": ...}``) and, per module, the keys of
    its model and optimizer entries (to hand each module back its own)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, optim, keys = {}, {}, []
    for m, opt in zip(modules, optimizers, strict=True):
        msd, osd = get_state_dict(m, opt, options=_options())
        model.update(msd)
        optim.update(osd)
        keys.append((set(msd), set(osd)))
    return {"model": model, "optim": optim}, keys


def save(directory: str, step: int, modules: list, optimizers: list, identity: dict) -> None:
    """Write this rank's part of step ``step``'s checkpoint (a collective of every rank)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from scalelab.results import write_text_atomic

    path = path_for(directory, step)
    state, _ = state_of(modules, optimizers)
    dcp.save(state, checkpoint_id=str(path))
    dist.barrier()
    if dist.get_rank() == 0:
        write_text_atomic(path / "identity.json",
                          json.dumps({"identity": identity, "step": step}))
        for old in sorted(steps_of(directory))[:-KEEP]:
            shutil.rmtree(path_for(directory, old), ignore_errors=True)


def resume(directory: str, modules: list, optimizers: list, identity: dict) -> int:
    """Load the newest checkpoint complete on every rank's view; its step (0: none)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    mine = max(steps_of(directory), default=0)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    step = min(everyone)
    if not step:
        return 0
    path = path_for(directory, step)
    check_identity(path, identity)
    state, keys = state_of(modules, optimizers)  # the tensors DCP loads into, in place
    dcp.load(state, checkpoint_id=str(path))
    for m, opt, (mkeys, okeys) in zip(modules, optimizers, keys, strict=True):
        set_state_dict(m, opt, model_state_dict={k: state["model"][k] for k in mkeys},
                       optim_state_dict={k: state["optim"][k] for k in okeys},
                       options=_options())
    return step
