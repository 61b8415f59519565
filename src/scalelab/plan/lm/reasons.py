"""Why the recommended layout: one sentence per degree and choice, with the formula's numbers
and what the other values of that choice give (the fastest layout at each value, or the
least memory where none fits)."""

from __future__ import annotations

from scalelab.text import format_s

GIB = 2**30


def gib(n: float) -> str:
    return f"{n / GIB:,.1f} GiB"


def _others(key: str, chosen, result, usable: float, fmt=str) -> str:
    """', tp 4: 1,234 tokens/s (-12.0%); tp 1: does not fit (142.0 GiB)' for the values
    of ``key`` other than ``chosen``."""
    best = result.best_by.get(key, {})
    least = result.least_by.get(key, {})
    ref = best.get(chosen)
    parts = []
    for value in sorted(set(best) | set(least), key=lambda v: (str(type(v)), v)):
        if value == chosen:
            continue
        if value in best:
            s = best[value]
            pct = (s.tokens_per_s / ref.tokens_per_s - 1) * 100 if ref else 0.0
            parts.append(f"{fmt(value)}: {s.tokens_per_s:,.0f} tokens/s ({pct:+.1f}%)")
        else:
            parts.append(f"{fmt(value)}: does not fit ({gib(least[value].memory_bytes)} "
                         f"per GPU at best, {gib(usable)} usable)")
    return "; against " + "; ".join(parts) if parts else ""


def degree_reasons(step, result, target, usable: float, memory_of=None) -> list[str]:
    """The reasons of each degree of ``step``'s layout (``memory_of(layout)``: bytes per
    GPU, for what the other recomputations would need)."""
    lay = step.layout
    out = [
        _tp(step, result, target, usable),
        _pp(step, result, usable),
        _cp(step, result, usable),
        _dp(step, result, usable),
        (f"micro-batch {lay.micro_batch} x {lay.accumulation} micro-batches per step x dp "
         f"{lay.dp} = global batch {lay.global_batch} sequences"
         + _others("micro_batch", lay.micro_batch, result, usable,
                   lambda v: f"micro-batch {v}")),
        _recompute(step, usable, memory_of),
    ]
    if lay.tp > 1:
        out.append(("sequence parallelism on: the norms' and dropouts' activations are split "
                    "over the tensor ranks too (all-gather + reduce-scatter instead of each "
                    "all-reduce, the same bytes)" if lay.sequence_parallel else
                    "sequence parallelism off")
                   + _others("sequence_parallel", lay.sequence_parallel, result, usable,
                             lambda v: "with it" if v else "without it"))
    return out


def _tp(step, result, target, usable: float) -> str:
    lay = step.layout
    gpn = target.gpus_per_node
    if lay.tp == 1:
        head = "tp 1: no tensor split (each GPU runs whole layers)"
    else:
        where = (f"inside a node of {gpn} GPUs ({target.intra_node_Bps / 1e9:,.0f} GB/s per "
                 "direction)" if lay.tp <= gpn else
                 f"across {lay.tp // gpn} nodes (the NIC's {target.inter_node_Bps / 1e9:,.1f} "
                 "GB/s per GPU)")
        head = (f"tp {lay.tp} {where}: 4 collectives of b s h per layer per micro-batch cost "
                f"{format_s(step.tp_comm_s)} of the {format_s(step.step_s)} step; it divides "
                f"each layer's weights and activations by {lay.tp}")
    return head + _others("tp", lay.tp, result, usable, lambda v: f"tp {v}")


def _pp(step, result, usable: float) -> str:
    lay = step.layout
    if lay.pp == 1:
        head = "pp 1: no pipeline (no bubble)"
    else:
        v = lay.vpp
        frac = (lay.pp - 1) / (v * lay.accumulation)
        form = f"(p-1)/(v m) = {lay.pp - 1}/({v} x {lay.accumulation})" if v > 1 else \
            f"(p-1)/m = {lay.pp - 1}/{lay.accumulation}"
        head = (f"pp {lay.pp} ({lay.schedule}" + (f", {v} virtual stages" if v > 1 else "")
                + f"): bubble {form} = {frac:.3f} of the compute, {format_s(step.pp_bubble_s)}"
                f", point-to-point sends {format_s(step.pp_p2p_s)}")
    return head + _others("pp", lay.pp, result, usable, lambda v: f"pp {v}")


def _cp(step, result, usable: float) -> str:
    lay = step.layout
    head = ("cp 1: whole sequences per rank" if lay.cp == 1 else
            f"cp {lay.cp}: each rank holds 2 of the sequence's {2 * lay.cp} chunks "
            f"({step.seq_len // lay.cp} tokens), keys and values passed around a ring of "
            f"{lay.cp}")
    return head + _others("cp", lay.cp, result, usable, lambda v: f"cp {v}")


def _dp(step, result, usable: float) -> str:
    lay = step.layout
    mem = step.memory
    state = mem.get("params", 0) + mem.get("grads", 0) + mem.get("optimizer", 0)
    lname = {"ddp": "plain DDP (state replicated)", "zero1": "ZeRO-1 (optimizer state "
             "sharded)", "zero2": "ZeRO-2 (gradients and optimizer state sharded)",
             "zero3": "ZeRO-3/FSDP (everything sharded)"}[lay.layout]
    head = (f"dp {lay.dp} = GPUs {lay.gpus} / (tp {lay.tp} x pp {lay.pp} x cp {lay.cp}), "
            f"{lname}: exchange left after the last backward {format_s(step.dp_exchange_s)}; "
            f"memory per GPU {gib(step.memory_bytes)} of {gib(usable)} usable (state "
            f"{gib(state)}, activations {gib(mem.get('activations', 0))}, buffers "
            f"{gib(mem.get('buffers', 0))})")
    return head + _others("zero", lay.zero, result, usable,
                          lambda v: ("ddp", "zero1", "zero2", "zero3")[v])


def _recompute(step, usable: float, memory_of) -> str:
    """The recomputation, and what the less recomputing ones need at this layout (more
    recomputation only adds FLOPs: never faster)."""
    from dataclasses import replace

    lay = step.layout
    head = {"none": "recompute none: every activation kept (no FLOPs repeated)",
            "selective": "recompute selective: the attention core's activations recomputed "
                         "in backward (its forward again, 4 L h s FLOPs per token)",
            "full": "recompute full: each block's forward run again in backward (2N + "
                    "4 L h s FLOPs per token), only block inputs kept"}[lay.recompute]
    less = {"none": (), "selective": ("none",), "full": ("none", "selective")}[lay.recompute]
    if less and memory_of is not None:
        need = "; ".join(f"recompute {rc} needs {gib(memory_of(replace(lay, recompute=rc)))}"
                         for rc in less)
        head += f": at this layout {need} per GPU, more than the {gib(usable)} usable"
    if lay.recompute != "full":
        head += "; recomputing more would only add FLOPs"
    return head
