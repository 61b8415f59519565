"""``run.json`` of a tensor-, pipeline- or FSDP x tensor-parallel run.

``steps`` holds each phase of :mod:`scalelab.runner.parallel_timing` (``compute_s``,
``tp_comm_s``, ``pp_bubble_s``, ``dp_exchange_s``, ``data_s``, ``optimizer_s``,
``step_s``, ``work_s``) as the median and spread over every rank's timed steps (``tp_comm_s``
over the probe steps, the others over the rest); ``split`` the medians
of the four the step is made of (compute, tensor-parallel communication, pipeline bubble,
data-parallel exchange) and the share of the step each is; ``losses`` the loss of every
step (the mean of the last stage's micro-batch losses, averaged over the data-parallel
ranks: what one process computes on the same batch).
"""

from __future__ import annotations

import statistics

from scalelab.runner.parallel_timing import split_records
from scalelab.runner.timers import summarize

PHASES = ("compute_s", "tp_comm_s", "pp_bubble_s", "dp_exchange_s", "data_s", "optimizer_s",
          "step_s", "work_s")
SPLIT = ("compute_s", "tp_comm_s", "pp_bubble_s", "dp_exchange_s")


def _timed(records: list[dict], warmup: int) -> list[dict]:
    kept = [r for r in records if r.get("step", 0) >= warmup]
    return kept or records


def losses_of(ranks: list[dict]) -> list[float]:
    """Per step, the loss averaged over the last stage's data-parallel ranks (tp 0)."""
    by_step: dict[int, list[float]] = {}
    for r in ranks:
        c = r["summary"]["coords"]
        if not r["summary"]["last"] or c["tp"] != 0:
            continue
        for rec in r["records"]:
            if "loss" in rec:
                by_step.setdefault(rec["step"], []).append(rec["loss"])
    return [statistics.fmean(by_step[s]) for s in sorted(by_step)]


def timing_of(cfg) -> dict:
    notes = ["every phase is host wall time on each rank (scalelab.runner.parallel_timing)"]
    if cfg.layout.tp > 1:
        notes.append("tp_comm_s: time inside DTensor's functional collectives, counted by a "
                     "dispatch mode around forward and backward on every second timed step "
                     "(a probe: its per-operator call slows it, so the other phases and the "
                     "step are the medians of the other steps)")
    if cfg.layout.pp > 1:
        notes.append("pp_bubble_s: the schedule's wall time less its stages' forward and "
                     "backward chunks (bubble and point-to-point transfers)")
    if cfg.fsdp:
        notes.append("dp_exchange_s: FSDP2's all-gathers and reduce-scatters run inside "
                     "forward and backward: in compute_s, not measured apart")
    if cfg.device == "cuda":
        notes.append("on cuda every phase boundary synchronizes the device; tensor-parallel "
                     "collectives are not timed apart (a wait on the host only orders the "
                     "device's streams): they are in compute_s, tp_comm_s is None")
    return {"clock": "the host's clock (time.perf_counter), per phase", "notes": notes}


def build(cfg, ranks: list[dict], wall_s: float, checksum: float) -> dict:
    """``ranks``: per rank ``{"rank", "records", "summary"}``."""
    warmup = cfg.warmup_used
    tp = cfg.layout.tp
    split_of = {r["rank"]: split_records(_timed(r["records"], warmup), tp) for r in ranks}
    steps = {p: summarize([v for s in split_of.values() for v in s.get(p, [])])
             for p in PHASES}
    if cfg.fsdp:  # inside forward and backward (timing_of)
        steps["dp_exchange_s"] = None
    step_med = steps["step_s"]["median"] if steps["step_s"] else None
    split = {}
    for p in SPLIT:
        if steps.get(p):
            med = steps[p]["median"]
        elif p == "tp_comm_s" and tp > 1 or p == "dp_exchange_s" and cfg.fsdp:
            med = None  # not measured: one timed step, or FSDP2's exchange
        else:
            med = 0.0  # no such phase
        split[p] = med
        split[p.removesuffix("_s") + "_share"] = (med / step_med if med is not None and
                                                  step_med else None)
    seqs = cfg.layout.global_batch
    per_rank = []
    for r in sorted(ranks, key=lambda r: r["rank"]):
        s = split_of[r["rank"]]
        row = {"rank": r["rank"], "role": "worker", "index": r["rank"],
               "steps": len(r["records"]),
               **{p: (summarize(s.get(p, [])) or {}).get("median") for p in PHASES}}
        row.update(r["summary"])
        per_rank.append(row)
    summary0 = ranks[0]["summary"] if ranks else {}
    return {
        "config": cfg.to_dict(),
        "world_size": cfg.world_size,
        "layout": cfg.layout.describe(),
        "steps": steps,
        "split": split,
        "timed_steps": cfg.steps - warmup,
        "warmup_steps_used": warmup,
        "losses": losses_of(ranks),
        "samples_per_s": seqs / step_med if step_med else None,
        "tokens_per_s": seqs * cfg.seq_len / step_med if step_med else None,
        "per_rank": per_rank,
        "final_param_checksum": checksum,
        "param_bytes": cfg.model.param_count() * 4,  # fp32
        "resumed_from_step": summary0.get("resumed_from_step", 0),
        "wall_s": wall_s,
        "timing": timing_of(cfg),
    }
