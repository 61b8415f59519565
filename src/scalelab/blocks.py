"""A model's blocks: the units sharded one by one (FSDP2) and recomputed one by one
(activation checkpointing), found from the module tree alone.

Both rules walk the model's children that hold parameters:

- :func:`fsdp_units`: a container (``Sequential``, ``ModuleList``, ``ModuleDict``: a
  language model's ``blocks``) of several such children
  gives its children (a ResNet's ``layer1`` its residual blocks, VGG's ``features`` its
  convolutions); a child whose parameters are mostly in such a container further down (a
  ViT's ``encoder``, whose ``layers`` hold the transformer blocks; a GPT's ``transformer``
  holding ``h``) is walked the same way; any other child is one unit. The root keeps what
  is left (embeddings, class tokens, norms directly on a walked module).
- :func:`recompute_units`: the same walk, but a unit must be a *block* (a module with
  modules inside: a residual block, a transformer block, an Inception module); a
  ``Sequential`` whose children are single layers (VGG's ``features`` and ``classifier``,
  a plain ``Sequential`` model) is cut into about sqrt(n) runs of consecutive layers, each
  recomputed as one block with its ReLUs and pools inside; a single layer on its own (a
  ResNet's stem ``conv1``, the final ``fc``) is left alone, since recomputing one layer
  frees nothing (its input is saved either way).
"""

from __future__ import annotations

import math

import torch
from torch import nn

CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def _has_params(m: nn.Module) -> bool:
    return any(True for _ in m.parameters())


def _numel(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def _composite(m: nn.Module) -> bool:
    return any(True for _ in m.children())


def _repeated(m: nn.Module) -> list[nn.Module] | None:
    """A container's children that hold parameters, when there are several (its blocks)."""
    if not isinstance(m, CONTAINERS):
        return None
    inner = [c for c in m.children() if _has_params(c)]
    return inner if len(inner) > 1 else None


def _stack_inside(m: nn.Module) -> bool:
    """Whether most of ``m``'s parameters sit in one container of several blocks below it."""
    total = _numel(m)
    return total > 0 and any(_repeated(d) is not None and 2 * _numel(d) > total
                             for name, d in m.named_modules() if name)


def fsdp_units(model: nn.Module) -> list[nn.Module]:
    """The units FSDP2 shards one by one (module docstring). Modules that share a parameter
    with another unit (a language model's token embedding and the head tied to it) are
    left to the root: a parameter belongs to one unit, gathered wherever it is used."""
    units = _units(model)
    owners: dict[int, int] = {}
    for i, u in enumerate(units):
        for p in u.parameters():
            owners[id(p)] = -1 if owners.get(id(p), i) != i else i
    return [u for u in units if all(owners[id(p)] >= 0 for p in u.parameters())]


def _units(model: nn.Module) -> list[nn.Module]:
    out: list[nn.Module] = []
    for child in model.children():
        if not _has_params(child):
            continue
        inner = _repeated(child)
        if inner is not None:
            out.extend(inner)
        elif _stack_inside(child):
            out.extend(_units(child))
        else:
            out.append(child)
    return out


def _blocks(model: nn.Module) -> list[tuple[nn.Module, ...]]:
    out: list[tuple[nn.Module, ...]] = []
    for child in model.children():
        if not _has_params(child):
            continue
        inner = _repeated(child)
        if inner is not None and any(_composite(c) for c in inner):
            out.extend((c,) for c in inner)
        elif inner is None and _stack_inside(child):
            out.extend(_blocks(child))
        elif isinstance(child, nn.Sequential) and inner is not None:
            out.extend(_groups(child))
        elif _composite(child):
            out.append((child,))
    return out


def _groups(seq: nn.Sequential) -> list[tuple[nn.Module, ...]]:
    """A ``Sequential`` of single layers cut into about sqrt(n) runs of consecutive layers
    (Chen et al. 2016, "Training deep nets with sublinear memory cost": sqrt(n) segments
    keep O(sqrt(n)) activations), each starting at a layer with parameters (an in-place
    ReLU must not modify a recomputed run's saved input)."""
    layers = list(seq.children())
    size = math.ceil(len(layers) / math.ceil(math.sqrt(len(layers))))
    out: list[list[nn.Module]] = [[]]
    for m in layers:  # a run starts at a layer with parameters: never at an in-place ReLU
        if len(out[-1]) >= size and _has_params(m):
            out.append([])
        out[-1].append(m)
    return [tuple(g) for g in out]


def recompute_units(model: nn.Module) -> list[tuple[nn.Module, ...]]:
    """The blocks activation checkpointing recomputes one by one (module docstring), each a
    run of consecutive modules (one module, or a run of a ``Sequential``'s layers)."""
    found = _blocks(model)
    if found:
        return found
    if isinstance(model, nn.Sequential) and _repeated(model) is not None:
        return _groups(model)
    return [(model,)] if _has_params(model) else []


def _run(group: tuple[nn.Module, ...]):
    def run(x):
        for m in group:
            x = m(x)
        return x
    return run


def checkpoint_blocks(model: nn.Module) -> list[tuple[nn.Module, ...]]:
    """Recompute every block of ``model`` in backward (:func:`recompute_units`) with
    ``torch.utils.checkpoint.checkpoint`` (non-reentrant, so it composes with DDP, FSDP2's
    hooks and autocast), which keeps only a block's inputs and runs its forward again when
    backward reaches it: a block's ``forward`` runs under it; a ``Sequential`` of single
    layers runs its runs of layers under it one after the other. Returns the blocks."""
    from torch.utils.checkpoint import checkpoint

    units = recompute_units(model)
    by_parent: dict[int, list[tuple[nn.Module, ...]]] = {}
    for unit in units:
        if len(unit) == 1 and not _is_layer_group(model, unit):
            inner = unit[0].forward

            def forward(*args, _inner=inner, **kwargs):
                return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

            unit[0].forward = forward
        else:
            by_parent.setdefault(id(_parent(model, unit[0])), []).append(unit)
    for parent in {id(p): p for p in model.modules()}.values():
        groups = by_parent.get(id(parent))
        if groups:
            def forward(x, _groups=tuple(groups)):
                for g in _groups:
                    x = checkpoint(_run(g), x, use_reentrant=False)
                return x

            parent.forward = forward
    return units


def _parent(model: nn.Module, child: nn.Module) -> nn.Module:
    for m in model.modules():
        if any(c is child for c in m.children()):
            return m
    return model


def _is_layer_group(model: nn.Module, unit: tuple[nn.Module, ...]) -> bool:
    """Whether ``unit`` is a run of a ``Sequential``'s single layers (not a block)."""
    parent = _parent(model, unit[0])
    return isinstance(parent, nn.Sequential) and not any(
        _composite(c) for c in parent.children() if _has_params(c)) and parent is not unit[0]


def recompute_saved_bytes(model: nn.Module, run) -> tuple[int, int]:
    """(bytes forward saves plainly, bytes it saves with every block recomputed), counted
    with ``torch.autograd.graph.saved_tensors_hooks`` while ``run()`` does one forward.

    With recomputation a step keeps what is saved outside the blocks, each block's inputs,
    and, while backward recomputes one block, that block's own saved tensors: the largest
    block's. Works on meta tensors (each storage counted once)."""
    units = recompute_units(model)
    where: list[int] = []
    per = [0] * len(units)
    inputs = [0] * len(units)
    state = {"outside": 0}
    seen: set[int] = set()
    keep: list[torch.Tensor] = []
    param_ids = {id(p) for p in model.parameters()}

    def size(t: torch.Tensor) -> int:
        base = t._base if t._base is not None else t
        if id(base) in seen or id(base) in param_ids:
            return 0
        seen.add(id(base))
        keep.append(base)
        return base.untyped_storage().nbytes()

    def pack(t):
        n = size(t)
        if where:
            per[where[-1]] += n
        else:
            state["outside"] += n
        return t

    def pre(i):
        def hook(_m, args):
            inputs[i] += sum(t.untyped_storage().nbytes() for t in args if torch.is_tensor(t))
            where.append(i)
        return hook

    def post(_m, _args, _out):
        where.pop()

    handles = [h for i, u in enumerate(units)
               for h in (u[0].register_forward_pre_hook(pre(i)),
                         u[-1].register_forward_hook(post))]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run()
    finally:
        for h in handles:
            h.remove()
    plain = state["outside"] + sum(per)
    return plain, state["outside"] + sum(inputs) + max(per, default=0)
