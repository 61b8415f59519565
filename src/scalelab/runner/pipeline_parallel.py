"""Pipeline parallelism of the project's transformer with ``torch.distributed.pipelining``.

The model's ``L`` blocks are cut into ``S = pp * vpp`` contiguous stages of as equal a size
as they divide into (the first ``L mod S`` stages one block more). Stage ``s`` is the model
itself with what it does not hold removed, as :mod:`scalelab.models.model` provides: its
blocks outside the stage deleted from ``blocks``, ``tok_emb``/``pos_emb`` set to ``None``
on every stage but the first, ``norm``/``head`` on every stage but the last. Every stage
is cut from the same seeded model, so its parameters start as one process's do.

Pipeline rank ``i`` holds stages ``i, i + pp, i + 2 pp, ...`` (the looped placement of
Megatron-LM's interleaved schedule, as torchtitan places them), so with ``vpp = 1`` rank
``i`` holds stage ``i``. Schedules: ``gpipe`` (all forwards, then all backwards), ``1f1b``
(one forward, one backward in the steady state; at most ``pp`` micro-batches in flight)
and ``interleaved`` (Interleaved 1F1B over the ``vpp`` stages of each rank: the bubble is
``(pp - 1) / (vpp m)`` of the ideal step instead of ``(pp - 1) / m``).

The schedule averages the micro-batches' gradients (``scale_grads``): with the per
micro-batch mean next-token loss, the step's gradient is that of the batch's mean loss,
as one process computes it.
"""

from __future__ import annotations

import time

from scalelab.models.config import TransformerConfig

SCHEDULE_CLASSES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
                    "interleaved": "ScheduleInterleaved1F1B"}


def stage_blocks(layers: int, stages: int) -> list[range]:
    """The block indices of each of ``stages`` contiguous stages (earlier stages take the
    remainder)."""
    if not 1 <= stages <= layers:
        raise ValueError(f"{stages} pipeline stages cannot split {layers} layers")
    base, extra = divmod(layers, stages)
    out, start = [], 0
    for s in range(stages):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def stages_of_rank(pp_rank: int, pp: int, vpp: int) -> list[int]:
    """The stage indices pipeline rank ``pp_rank`` holds (looped placement)."""
    return [pp_rank + v * pp for v in range(vpp)]


def check_tied(cfg: TransformerConfig, pp: int) -> None:
    """A tied head and embedding would sit on two stages: refused (one line)."""
    if pp > 1 and cfg.tied:
        raise ValueError(f"{cfg.name} ties its head to its token embedding, which a pipeline "
                         f"of {pp} stages puts on different ranks: untie them "
                         "(tied = false) or use --pp 1")


def cut_stage(model, stage: int, stages: int):
    """``model`` reduced in place to stage ``stage`` of ``stages`` (see module docstring)."""
    keep = {str(i) for i in stage_blocks(model.cfg.layers, stages)[stage]}
    for name in list(model.blocks.keys()):
        if name not in keep:
            del model.blocks[name]
    if stage > 0:
        model.tok_emb = None
        model.pos_emb = None
    if stage < stages - 1:
        model.norm = None
        model.head = None
    return model


class TimedStage:
    """Adds up the seconds a pipeline stage spends in its forward and backward chunks
    (the stage's computation, and any tensor-parallel communication inside it); the rest of
    a schedule's step is its bubble and its point-to-point transfers."""

    def __init__(self, stage):
        self.stage = stage
        self.busy_s = 0.0
        fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk

        def timed_fwd(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fwd(*args, **kwargs)
            finally:
                self.busy_s += time.perf_counter() - t

        def timed_bwd(*args, **kwargs):
            t = time.perf_counter()
            try:
                return bwd(*args, **kwargs)
            finally:
                self.busy_s += time.perf_counter() - t

        stage.forward_one_chunk = timed_fwd
        stage.backward_one_chunk = timed_bwd

    def take(self) -> float:
        s, self.busy_s = self.busy_s, 0.0
        return s


def build_schedule(modules: list, stage_ids: list[int], stages: int, schedule: str,
                   microbatches: int, loss_fn, device, group):
    """The ``torch.distributed.pipelining`` schedule of this rank's stage modules.

    Returns ``(schedule, timed)``: ``timed`` are the :class:`TimedStage` wrappers."""
    import torch.distributed.pipelining as pipelining

    built = [pipelining.PipelineStage(m, s, stages, device, group=group)
             for m, s in zip(modules, stage_ids, strict=True)]
    timed = [TimedStage(st) for st in built]
    cls = getattr(pipelining, SCHEDULE_CLASSES[schedule])
    if schedule == "interleaved":
        sched = cls(built, n_microbatches=microbatches, loss_fn=loss_fn)
    else:
        (one,) = built
        sched = cls(one, n_microbatches=microbatches, loss_fn=loss_fn)
    return sched, timed
