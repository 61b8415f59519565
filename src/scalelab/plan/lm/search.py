"""The search: every layout of :mod:`scalelab.plan.lm.space` on one cluster, memory first,
then the step model, ranked fastest first.

For each layout the memory per GPU is computed first (cheap: no compute model); a layout
that does not fit the device is not evaluated further. Layouts that differ only in
micro-batch and recomputation (:class:`scalelab.plan.lm.space.Family`) are taken smallest
micro-batch first and least recomputed first: the first recomputation that fits is the one
evaluated (recomputing more adds FLOPs to the same step and changes nothing else, so it
cannot be faster), and a micro-batch at which even the most recomputation does not fit
ends the family (activations grow with the micro-batch; the state does not shrink).

The step model is a function ``evaluate(model, layout, seq_len, target)`` returning a step
with at least ``step_s``, ``tokens_per_s``, ``memory_bytes`` and ``fits`` (by default
:func:`scalelab.plan.lm.step.lm_step`); the memory model ``memory(model, layout, seq_len)``
returns bytes per GPU. Both are parameters so the search can be held against a model small
enough to check by hand.

At one cluster the fastest layout is also the cheapest per token (every layout pays for the
same GPUs for its step): the cost objective differs only across GPU types
(:mod:`scalelab.plan.lm.recommend`). Among the layouts within :data:`NEAR_TIE` of the
fastest the simplest is recommended (fewest model-parallel splits, then the least sharding
and recomputation), as the data-parallel plan prefers the simplest architecture within 2%.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scalelab.errors import UsageError
from scalelab.parallel import RECOMPUTE, ParallelLayout
from scalelab.plan.lm.space import Choices, check_choices, families

#: a layout this much slower than the fastest still counts as a tie (the step model's own
#: band is wider: a tie is decided by simplicity, not by noise)
NEAR_TIE = 0.02
#: layouts kept for the recommendation, its runners-up and the reasons
KEEP = 64
#: the choices a reason compares, each with its best value
CHOICE_KEYS = ("tp", "pp", "cp", "dp", "zero", "recompute", "micro_batch", "schedule", "vpp",
               "sequence_parallel", "precision")
#: the choices whose values a reason may find nothing fitting at
LEAST_KEYS = ("tp", "pp", "cp", "zero", "recompute", "micro_batch")


def simplicity(lay: ParallelLayout) -> tuple:
    """Smaller is simpler: fewer model-parallel splits, then pipeline, context, sharding,
    recomputation, virtual stages, a schedule other than 1F1B, sequence parallelism off."""
    return (lay.tp * lay.pp * lay.cp, lay.pp, lay.cp, lay.tp, lay.zero,
            RECOMPUTE.index(lay.recompute), lay.vpp, lay.schedule != "1f1b",
            lay.sequence_parallel, -lay.micro_batch)


@dataclass(frozen=True)
class Unfit:
    """A layout that does not fit, with its memory per GPU."""

    layout: ParallelLayout
    memory_bytes: float


@dataclass(frozen=True)
class SearchResult:
    """What the search found on one cluster."""

    ranked: tuple[Any, ...]
    """Steps that fit, fastest first (at most :data:`KEEP`)."""
    considered: int
    """Layouts the choices leave (each recomputation of a group counted)."""
    memory_checked: int
    """Layouts whose memory was computed."""
    evaluated: int
    """Layouts the step model evaluated (those that fit)."""
    seconds: float
    """Wall time of the search."""
    best_by: dict[str, dict[Any, Any]] = field(default_factory=dict)
    """For each of :data:`CHOICE_KEYS`, the fastest fitting step at each value."""
    least_by: dict[str, dict[Any, Unfit]] = field(default_factory=dict)
    """For each choice's values where nothing fits, the layout with the least memory."""
    smallest: Unfit | None = None
    """The layout with the least memory per GPU (what comes closest when nothing fits)."""

    @property
    def fitting(self) -> int:
        return self.evaluated

    def choose(self, near_tie: float = NEAR_TIE):
        """The recommendation: the simplest step within ``near_tie`` of the fastest."""
        if not self.ranked:
            return None
        limit = self.ranked[0].step_s * (1.0 + near_tie)
        return min((s for s in self.ranked if s.step_s <= limit),
                   key=lambda s: simplicity(s.layout))


def search(model, seq_len: int, global_batch: int, gpus: int, target, choices: Choices,
           precisions: tuple[str, ...], usable_bytes: float,
           evaluate: Callable | None = None, memory: Callable | None = None,
           keep: int = KEEP) -> SearchResult:
    """Every layout of ``gpus`` GPUs the ``choices`` leave (module docstring)."""
    if evaluate is None or memory is None:
        from scalelab.plan.lm.memory import memory_per_gpu
        from scalelab.plan.lm.step import lm_step

        evaluate = evaluate or lm_step
        memory = memory or (lambda cfg, lay, seq: memory_per_gpu(cfg, lay, seq).total)
    check_choices(model, seq_len, global_batch, gpus, choices)
    start = time.perf_counter()
    heap: list = []
    best_by: dict[str, dict[Any, Any]] = {k: {} for k in CHOICE_KEYS}
    least_by: dict[str, dict[Any, Unfit]] = {k: {} for k in LEAST_KEYS}
    considered = checked = evaluated = 0
    smallest: Unfit | None = None
    for fam in families(model, seq_len, global_batch, gpus, choices, precisions):
        considered += len(fam.micro_batches) * len(fam.recomputes)
        known: dict[tuple[int, str], float] = {}
        if len(fam.recomputes) > 1:  # the least memory of the family first: dead or not
            lay = fam.layout(fam.micro_batches[0], fam.recomputes[-1])
            checked += 1
            mem = known[lay.micro_batch, lay.recompute] = memory(model, lay, seq_len)
            if mem > usable_bytes:
                smallest = _unfit(least_by, smallest, lay, mem)
                continue
        first = 0  # what did not fit at a smaller micro-batch does not fit at a larger one
        for mb in fam.micro_batches:
            step = None
            for i, rc in enumerate(fam.recomputes[first:], first):
                lay = fam.layout(mb, rc)
                mem = known.get((mb, rc))
                if mem is None:
                    checked += 1
                    mem = memory(model, lay, seq_len)
                if mem <= usable_bytes:
                    step = evaluate(model, lay, seq_len, target)
                    first = i
                    break  # recomputing more only adds FLOPs: slower, not evaluated
                smallest = _unfit(least_by, smallest, lay, mem)
            if step is None:
                break  # nothing fits at this micro-batch: a larger one holds more
            evaluated += 1
            _best(best_by, step)
            item = (-step.step_s, -evaluated, step)
            if len(heap) < keep:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    ranked = tuple(s for _, _, s in sorted(heap, reverse=True))
    if considered == 0:
        raise UsageError(_nothing_text(model, seq_len, global_batch, gpus, choices))
    for key in LEAST_KEYS:  # a value where something fits needs no 'least memory'
        for value in best_by[key]:
            least_by[key].pop(value, None)
    return SearchResult(ranked, considered, checked, evaluated,
                        time.perf_counter() - start, best_by, least_by, smallest)


def _best(best_by: dict, step) -> None:
    lay = step.layout
    for key in CHOICE_KEYS:
        value = getattr(lay, key)
        cur = best_by[key].get(value)
        if cur is None or step.step_s < cur.step_s:
            best_by[key][value] = step


def _unfit(least_by: dict, smallest: Unfit | None, lay: ParallelLayout, mem: float
           ) -> Unfit:
    """Records a layout that does not fit; returns the smallest such so far."""
    _least(least_by, lay, mem)
    return Unfit(lay, mem) if smallest is None or mem < smallest.memory_bytes else smallest


def _least(least_by: dict, lay: ParallelLayout, mem: float) -> None:
    for key in LEAST_KEYS:
        value = getattr(lay, key)
        cur = least_by[key].get(value)
        if cur is None or mem < cur.memory_bytes:
            least_by[key][value] = Unfit(lay, mem)


def _nothing_text(model, seq_len: int, global_batch: int, gpus: int, ch: Choices) -> str:
    fixed = ", ".join(f"{k} {v}" for k, v in ch.fixed().items())
    return (f"no layout of {model.name} at --seq-len {seq_len} and --global-batch "
            f"{global_batch} on {gpus} GPUs" + (f" with {fixed}" if fixed else "")
            + ": the data-parallel degree G / (tp pp cp) must divide the global batch and "
            "the micro-batches must fill the pipeline (raise --global-batch or free a "
            "fixed choice)")
