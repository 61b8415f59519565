"""Tensor (and sequence) parallelism of the project's transformer, by module name.

The plan is Megatron-LM's split as torchtitan writes it with DTensor's
``parallelize_module``, on the module names of :mod:`scalelab.models.model`:

- attention: ``wq``, ``wk``, ``wv`` column-parallel (each rank computes ``heads / tp`` query
  heads and ``kv_heads / tp`` key/value heads; attention reads its local head count from the
  weights' shapes), ``wo`` row-parallel (its partial sums all-reduced, or reduce-scattered
  over the sequence with sequence parallelism);
- MLP: ``w1``/``w3`` (llama) or ``fc`` (gpt2) column-parallel, ``w2``/``proj`` row-parallel;
- the block's input is made a DTensor once per sub-layer (``PrepareModuleInput`` on
  ``attn`` and ``mlp``), so backward reduces the input's gradient once, not once per
  projection;
- with sequence parallelism (``sequence_parallel``): ``attn_norm``/``mlp_norm`` run on the
  rank's slice of the sequence (``SequenceParallel``), ``attn``/``mlp`` all-gather it, the
  row-parallel outputs reduce-scatter back to slices; a stage's first block takes the full
  sequence and keeps its slice (no communication; backward all-gathers), its last block
  gathers the slices again, so whatever a stage receives or sends is the whole hidden state.

The embeddings, the final norm and the vocabulary head stay replicated (every rank computes
them whole): their gradients are then the one process's, element for element, and a tied
head and embedding (gpt2) keep one weight. A vocabulary-parallel head with ``loss_parallel``
would divide the head's work by ``tp`` but sums the softmax over the vocabulary in another
order; the replicated head is what equals one process in fp32 (checked to 1e-5 by the tests).
"""

from __future__ import annotations

from scalelab.models.config import TransformerConfig


def check_tp(cfg: TransformerConfig, tp: int) -> None:
    """``ValueError`` unless ``tp`` divides the heads, the key/value heads and the MLP."""
    if cfg.heads % tp or cfg.kv_heads % tp:
        raise ValueError(f"tensor degree {tp} does not divide {cfg.name}'s {cfg.heads} "
                         f"attention heads and {cfg.kv_heads} key/value heads")
    if cfg.ffn % tp:
        raise ValueError(f"tensor degree {tp} does not divide {cfg.name}'s MLP width "
                         f"{cfg.ffn}")


def block_plan(cfg: TransformerConfig, sequence_parallel: bool, first: bool,
               last: bool) -> dict:
    """The parallel styles of one block's modules (names relative to the block).

    ``first``/``last``: the block begins/ends a stage (with sequence parallelism it then
    takes the whole sequence and keeps its slice / gathers the slices back)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleInputOutput,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
    )

    between = Shard(1) if sequence_parallel else Replicate()
    plan = {
        "attn": PrepareModuleInput(input_layouts=(between, None),
                                   desired_input_layouts=(Replicate(), None)),
        "attn.wq": ColwiseParallel(),
        "attn.wk": ColwiseParallel(),
        "attn.wv": ColwiseParallel(),
        "attn.wo": RowwiseParallel(output_layouts=between),
        "mlp": PrepareModuleInput(input_layouts=(between,),
                                  desired_input_layouts=(Replicate(),)),
    }
    if cfg.style == "llama":
        plan.update({"mlp.w1": ColwiseParallel(), "mlp.w3": ColwiseParallel(),
                     "mlp.w2": RowwiseParallel(output_layouts=between)})
    else:
        plan.update({"mlp.fc": ColwiseParallel(),
                     "mlp.proj": RowwiseParallel(output_layouts=between)})
    if sequence_parallel:
        plan["attn_norm"] = SequenceParallel()
        plan["mlp_norm"] = SequenceParallel()
        if first and last:
            plan[""] = PrepareModuleInputOutput(
                input_layouts=(Replicate(), None), desired_input_layouts=(Shard(1), None),
                use_local_input=True, output_layouts=Shard(1),
                desired_output_layouts=Replicate(), use_local_output=True)
        elif first:
            plan[""] = PrepareModuleInput(input_layouts=(Replicate(), None),
                                          desired_input_layouts=(Shard(1), None),
                                          use_local_output=True)
        elif last:
            plan[""] = PrepareModuleOutput(output_layouts=Shard(1),
                                           desired_output_layouts=Replicate(),
                                           use_local_output=True)
    return plan


def apply_tp(model, tp_mesh, sequence_parallel: bool) -> None:
    """Parallelize ``model`` (a :class:`~scalelab.models.model.Transformer` or a pipeline
    stage of one) in place over the 1-D mesh ``tp_mesh``."""
    from torch.distributed.tensor.parallel import parallelize_module

    cfg = model.cfg
    check_tp(cfg, tp_mesh.size())
    names = list(model.blocks.keys())
    for i, name in enumerate(names):
        plan = block_plan(cfg, sequence_parallel, first=i == 0, last=i == len(names) - 1)
        whole = plan.pop("", None)
        parallelize_module(model.blocks[name], tp_mesh, plan)
        if whole is not None:
            parallelize_module(model.blocks[name], tp_mesh, whole)
