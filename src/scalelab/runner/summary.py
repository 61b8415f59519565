"""Every rank's summary -> the ``run.json`` content (``scalelab.run/1``)."""

from __future__ import annotations

import statistics

import torch

from scalelab.runner.timers import spread_of

WORKER_PHASES = ("data_s", "compute_s", "push_s", "pull_s", "step_s", "exchange_s")


def _after_warmup(steps: list[dict], warmup: int) -> list[dict]:
    return steps[warmup:] if len(steps) > warmup else steps


def build_run(config, summaries: list[dict]) -> dict:
    workers = [s for s in summaries if s["role"] == "worker"]
    servers = [s for s in summaries if s["role"] == "server"]
    warm = config.warmup_steps
    pooled: dict[str, list[float]] = {}
    for s in workers:
        for line in _after_warmup(s["steps"], warm):
            for ph in WORKER_PHASES + ("apply_s",):
                if ph in line:
                    pooled.setdefault(ph, []).append(line[ph])
    server_warm = warm * config.workers if config.mode == "async" else warm
    for s in servers:
        for line in _after_warmup(s["steps"], server_warm):
            for ph in ("apply_s", "wait_s", "send_s"):
                if ph in line:
                    pooled.setdefault(("server_" + ph) if ph != "apply_s" else ph, []).append(
                        line[ph])
    steps = {ph: spread_of(pooled.get(ph, [])) for ph in
             ("compute_s", "push_s", "apply_s", "pull_s", "data_s", "step_s", "exchange_s")}
    step_med = steps["step_s"]["median"] if steps["step_s"] else None
    samples_per_s = (config.workers * config.batch_size / step_med) if step_med else None
    w0 = next(s for s in workers if s["index"] == 0)
    if config.architecture == "ps":
        bytes_per_step = {
            "worker": w0["bytes"],
            "server": [{"rank": s["rank"], "index": s["index"], **s["bytes"]}
                       for s in sorted(servers, key=lambda s: s["index"])],
        }
        ex = steps["exchange_s"]
        moved = w0["bytes"]["push_bytes"] + w0["bytes"]["pull_bytes"]
        achieved = moved / ex["median"] if ex and ex["median"] > 0 else None
    else:
        bytes_per_step = {"worker": w0["bytes"]}
        achieved = None
    per_rank = []
    for s in sorted(summaries, key=lambda s: s["rank"]):
        own = _after_warmup(s["steps"], server_warm if s["role"] == "server" else warm)
        entry = {"rank": s["rank"], "role": s["role"], "index": s["index"],
                 "steps_run": len(s["steps"]), "wall_s": s["wall_s"], "threads": s["threads"]}
        for ph in WORKER_PHASES + ("apply_s", "wait_s", "send_s"):
            vals = [line[ph] for line in own if ph in line]
            if vals:
                entry[ph] = statistics.median(vals)
        losses = [line["loss"] for line in s["steps"] if "loss" in line]
        if losses:
            entry["first_loss"], entry["last_loss"] = losses[0], losses[-1]
        if "staleness" in s:
            entry["staleness"] = {"median": statistics.median(s["staleness"]),
                                  "max": max(s["staleness"]),
                                  "mean": statistics.fmean(s["staleness"])}
        per_rank.append(entry)
    out = {
        "config": config.to_dict(),
        "environment": {"torch": torch.__version__, "backend": "gloo",
                        "world_size": config.world_size},
        "steps": steps,
        "samples_per_s": samples_per_s,
        "bytes_per_step": bytes_per_step,
        "achieved_bandwidth_Bps": achieved,
        "per_rank": per_rank,
        "final_param_checksum": w0.get("final_param_checksum"),
        "start_step": config.start_step,
    }
    if "partition" in w0:
        out["partition"] = w0["partition"]
    stale = [v for s in servers for v in s.get("staleness", [])]
    if stale:
        out["staleness"] = {"median": statistics.median(stale), "max": max(stale),
                            "mean": statistics.fmean(stale)}
    return out
