"""Assemble ``run.json`` from the per-rank step records and summaries.

``samples_per_step`` is W x b x K (K micro-batches of b per exchange), ``memory`` the
largest worker peak over the timed steps (:class:`scalelab.runner.accumulate.PeakMemory`).
``bytes_per_step`` per role: ``bytes_sent``/``bytes_received`` (parameter server),
``bytes_reduced`` (DDP) and, for workers that stage their exchange through host memory (on a
GPU), ``bytes_staged_d2h``/``bytes_staged_h2d`` (bytes copied across the host link).
"""

from __future__ import annotations

import statistics

from scalelab.runner.timers import summarize
from scalelab.theory.amdahl import weak_throughput

WORKER_PHASES = ("compute_s", "push_s", "apply_s", "pull_s", "data_s", "step_s", "cpu_s")
SERVER_PHASES = ("recv_s", "apply_s", "send_s", "step_s", "cpu_s")


def _timed(records: list[dict], warmup: int) -> list[dict]:
    """Steps after the warm-up (all of them when the run is too short to drop any)."""
    kept = [r for r in records if r.get("step", 0) >= warmup]
    return kept or records


def _phase(records: list[dict], name: str) -> dict | None:
    return summarize([r[name] for r in records if name in r])


def timing_of(cfg) -> dict:
    """How this run's phases were timed, and the waits that remain in the step."""
    if cfg.device == "cuda":
        clock = ("CUDA events on each worker's stream at every phase boundary, read one step "
                 "later: no synchronization is added to time a step")
        waits = ["checkpoints copy the state to the host (every --checkpoint-every steps)"]
        if cfg.architecture == "ps":
            waits.insert(0, "a parameter-server worker waits on the host for each piece's "
                            "device-to-host copy before sending it, and for its pulls before "
                            "the next forward: the exchange itself, timed as push_s and pull_s")
    else:
        clock = "the host's clock (time.perf_counter) at every phase boundary"
        waits = []
    return {"clock": clock, "waits": waits, "algorithm": cfg.algorithm}


def _peak_memory(per_rank_list: list[dict]) -> dict | None:
    """The workers' peaks (their ``memory`` summaries): the largest, and what it counts."""
    rows = [p["memory"] for p in per_rank_list
            if p["role"] == "worker" and (p.get("memory") or {}).get("peak_bytes")]
    if not rows:
        return None
    top = max(rows, key=lambda m: m["peak_bytes"])
    out = {"peak_bytes": top["peak_bytes"], "baseline_bytes": top.get("baseline_bytes")}
    if "counted" in top:
        out["counted"] = top["counted"]
    return out


def build(cfg, ranks: list[dict], wall_s: float) -> dict:
    """``ranks``: per rank ``{"rank", "role", "index", "records": [...], "summary": {...}}``."""
    warmup = min(cfg.warmup_steps, max(cfg.steps - 1, 0))
    workers = [r for r in ranks if r["role"] == "worker"]
    servers = [r for r in ranks if r["role"] == "server"]
    w_recs = [rec for r in workers for rec in _timed(r["records"], warmup)]
    s_recs = [rec for r in servers for rec in _timed(r["records"], warmup)]
    steps = {name: _phase(w_recs, name) for name in WORKER_PHASES}
    if cfg.architecture == "ps":
        steps["apply_s"] = _phase(s_recs, "apply_s")
    steps["exchange_s"] = (
        summarize([r.get("push_s", 0.0) + r.get("pull_s", 0.0) for r in w_recs])
        if cfg.architecture == "ps" else None)
    server_steps = {name: _phase(s_recs, name) for name in SERVER_PHASES} if servers else None

    def per_rank(r: dict) -> dict:
        recs = _timed(r["records"], warmup)
        phases = WORKER_PHASES if r["role"] == "worker" else SERVER_PHASES
        out = {"rank": r["rank"], "role": r["role"], "index": r["index"],
               "steps": len(r["records"]),
               **{p: (_phase(recs, p) or {}).get("median") for p in phases}}
        for key in ("bytes_sent", "bytes_received", "bytes_reduced", "bytes_gathered",
                    "bytes_staged_d2h", "bytes_staged_h2d"):
            vals = [rec[key] for rec in recs if key in rec]
            if vals:
                out[key + "_per_step"] = statistics.mean(vals)
        out.update(r.get("summary", {}))
        return out

    per_rank_list = [per_rank(r) for r in sorted(ranks, key=lambda r: r["rank"])]

    def role_bytes(role: str) -> dict | None:
        rows = [p for p in per_rank_list if p["role"] == role]
        if not rows:
            return None
        keys = [k for k in ("bytes_sent_per_step", "bytes_received_per_step",
                            "bytes_reduced_per_step", "bytes_gathered_per_step",
                            "bytes_staged_d2h_per_step",
                            "bytes_staged_h2d_per_step") if k in rows[0]]
        return {k.removesuffix("_per_step"): statistics.mean(p.get(k, 0) for p in rows)
                for k in keys}

    step_med = steps["step_s"]["median"] if steps["step_s"] else None
    if cfg.mode == "async":  # workers step independently: their throughputs add up
        samples_per_s = sum(weak_throughput(1, cfg.batch_size, p["step_s"])
                            for p in per_rank_list if p["role"] == "worker" and p.get("step_s"))
    else:
        samples_per_s = (weak_throughput(cfg.workers, cfg.samples_per_worker_step, step_med)
                         if step_med else None)
    wb = role_bytes("worker") or {}
    exch = steps["exchange_s"]
    achieved = None
    if exch and exch["median"] > 0 and "bytes_sent" in wb:
        achieved = (wb["bytes_sent"] + wb["bytes_received"]) / exch["median"]
    worker0 = next(p for p in per_rank_list if p["role"] == "worker" and p["index"] == 0)
    result = {
        "config": cfg.to_dict(),
        "world_size": cfg.world_size,
        "steps": steps,
        "timed_steps": (cfg.steps - warmup) if w_recs else 0,
        "warmup_steps_used": warmup,
        "server_steps": server_steps,
        "samples_per_s": samples_per_s,
        # a language model's samples are sequences of seq_len tokens
        "tokens_per_s": (samples_per_s * cfg.workload.seq_len
                         if cfg.workload.tokens and samples_per_s else None),
        "seq_len": cfg.workload.seq_len if cfg.workload.tokens else None,
        "bytes_per_step": {"worker": role_bytes("worker"), "server": role_bytes("server")},
        "achieved_bandwidth_Bps": achieved,
        "per_rank": per_rank_list,
        "final_param_checksum": worker0.get("final_param_checksum"),
        "param_bytes": worker0.get("param_bytes"),
        "resumed_from_step": worker0.get("resumed_from_step", 0),
        "wall_s": wall_s,
        "timing": timing_of(cfg),
        "accumulation_steps": cfg.accumulation_steps,
        "samples_per_step": cfg.workers * cfg.samples_per_worker_step,
        "recompute": cfg.recompute,
        "memory": _peak_memory(per_rank_list),
    }
    if servers:
        result["shard_fractions"] = worker0.get("shard_fractions")
    if cfg.mode == "async":
        stale = [p for p in per_rank_list if p["role"] == "server"]
        result["staleness"] = {
            "mean": statistics.mean(p["staleness_mean"] for p in stale),
            "max": max(p["staleness_max"] for p in stale)}
    return result
