"""A language model's plan: the search on each cluster, the objective, the recommendation
with its reasons and runners-up (plan.json).

Python use::

    from scalelab.plan import load_cluster
    from scalelab.plan.lm.inputs import LMWorkload, resolve_model
    from scalelab.plan.lm.recommend import lm_plan
    from scalelab.plan.lm.space import Choices
    wl = LMWorkload(resolve_model("llama3-70b"), "llama3-70b", seq_len=8192)
    c = load_cluster(None, {"nodes": 8, "gpus_per_node": 8, "device": "H100-SXM",
                            "network": "IB-NDR"})
    p = lm_plan(wl, [c], Choices())
    p.recommendation["tp"], p.to_dict()["recommendation"]["tokens_per_s"]

Objectives: ``time`` recommends the fastest layout (of every cluster given); ``cost`` the
cheapest per token, ``price per GPU-hour x GPUs / tokens per hour``, which at one cluster is
the fastest layout and across GPU types (several clusters, or ``--device A,B``) picks the
type; it needs a price for each (:mod:`scalelab.plan.lm.prices`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scalelab import hardware
from scalelab.errors import UsageError
from scalelab.parallel import ParallelLayout
from scalelab.plan.lm.inputs import LMWorkload
from scalelab.plan.lm.measured import compute_factor, scaled_evaluate
from scalelab.plan.lm.prices import Price, catalog_prices, price_of
from scalelab.plan.lm.reasons import degree_reasons, gib
from scalelab.plan.lm.search import NEAR_TIE, SearchResult, search, simplicity
from scalelab.plan.lm.space import Choices
from scalelab.text import format_s
from scalelab.theory import lm as lm_theory

OBJECTIVES = ("time", "cost")
#: runners-up listed beside the recommendation
ALTERNATIVES = 4


@dataclass(frozen=True)
class Candidate:
    """The best layout on one cluster."""

    cluster: Any
    target: Any
    price: Price | None
    result: SearchResult
    step: Any
    """The recommended step on this cluster (the simplest near the fastest)."""
    compute_factor: float | None = None
    """measured / estimated compute, when the workload gives a measured step."""

    @property
    def cost_per_million_tokens(self) -> float | None:
        if self.price is None:
            return None
        return lm_theory.cost_per_million_tokens(self.step.tokens_per_s,
                                                 self.step.layout.gpus,
                                                 self.price.per_gpu_hour)


@dataclass(frozen=True)
class LMPlan:
    """plan.json of a language model."""

    inputs: dict[str, Any]
    recommendation: dict[str, Any]
    search: dict[str, Any]
    warnings: tuple[str, ...] = ()
    estimate: bool = True
    band: tuple[float, float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "language-model", "inputs": self.inputs, "sweep": [],
                "recommendation": self.recommendation, "search": self.search,
                "warnings": list(self.warnings), "estimate": self.estimate,
                "estimate_of": "device" if self.estimate else None,
                "band": list(self.band) if self.band else None, **self.extra}


def default_precisions(device: str) -> tuple[str, ...]:
    """What a plan trains in unless told: bf16 where the device has a bf16 peak, else
    fp16, else tf32, else fp32 (fp8 only when asked: the step model gives it no speed of
    its own where the catalog has no fp8 peak)."""
    dev = hardware.device(device)
    for p in ("bf16", "fp16", "tf32", "fp32"):
        if dev.peak_flops(p):
            return (p,)
    raise UsageError(f"{dev.name} has no known peak FLOP/s in the catalog: a language-model "
                     "plan needs one (scalelab hardware show NAME)")


def _target(cluster, choices: Choices):
    from scalelab.plan.lm.step import LMTarget

    if cluster.device == "cpu":
        if (choices.cp or 1) > 1:
            raise UsageError("--cp on a CPU target: context parallelism runs only where CUDA "
                             "is (PyTorch's context_parallel has no sharding rule for the "
                             "CPU attention kernel)")
        raise UsageError("a language-model plan targets GPUs: the cpu has no peak FLOP/s or "
                         "memory in the catalog (--device NAME: scalelab hardware list)")

    try:
        return LMTarget.from_cluster(cluster)
    except ValueError as e:
        raise UsageError(f"{e} (--device NAME, or device = NAME in the cluster file)") from None


def _candidate(wl: LMWorkload, cluster, choices: Choices, global_batch: int,
               evaluate, memory) -> Candidate:
    target = _target(cluster, choices)
    precisions = (choices.precision,) if choices.precision else default_precisions(
        target.device)
    usable = target.memory_bytes * target.memory_margin
    factor = compute_factor(wl, precisions[0], evaluate)
    if factor is not None:
        evaluate = scaled_evaluate(factor, evaluate)
    result = search(wl.model, wl.seq_len, global_batch, cluster.gpus, target, choices,
                    precisions, usable, evaluate=evaluate, memory=memory)
    if not result.ranked:
        s = result.smallest
        raise UsageError(
            f"no layout of {wl.model.name} at --seq-len {wl.seq_len} fits the "
            f"{target.device}'s {gib(usable)} usable per GPU on {cluster.gpus} GPUs: the "
            f"least memory is {gib(s.memory_bytes)} ({s.layout.describe()}); add GPUs, "
            "shorten the sequence or free a fixed choice")
    return Candidate(cluster, target, price_of(cluster), result, result.choose(), factor)


def _need_prices(cands: list[Candidate]) -> None:
    missing = [c.target.device for c in cands if c.price is None]
    if missing:
        known = ", ".join(catalog_prices())
        raise UsageError(f"--objective cost needs a price per GPU-hour for "
                         f"{', '.join(missing)}: give price_per_gpu_hour in the cluster file "
                         f"or --price-per-gpu-hour (the catalog prices {known})")


def lm_plan(wl: LMWorkload, clusters: list, choices: Choices, objective: str = "time",
            global_batch: int | None = None, tokens: float | None = None,
            evaluate=None, memory=None) -> LMPlan:
    """The plan of ``wl`` on the best of ``clusters`` under ``objective`` (module
    docstring). ``evaluate``/``memory``: the step and memory models (default: the
    package's, :mod:`scalelab.plan.lm.step`)."""
    if objective not in OBJECTIVES:
        raise UsageError(f"unknown objective {objective!r} ({', '.join(OBJECTIVES)})")
    g = global_batch or wl.batch()
    tokens = tokens if tokens is not None else wl.tokens
    if choices.micro_batch is None and wl.micro_batch is not None:
        choices = Choices(**{**choices.fixed(), "micro_batch": wl.micro_batch})
    cands, unfit = [], []
    for c in clusters:
        try:
            cands.append(_candidate(wl, c, choices, g, evaluate, memory))
        except UsageError as e:
            # of several device types, one that cannot hold the model is left out, said
            if len(clusters) == 1 or not str(e).startswith("no layout of"):
                raise
            unfit.append(str(e))
    if not cands:
        raise UsageError(unfit[0] if len(unfit) == 1 else "; ".join(unfit))
    if objective == "cost":
        _need_prices(cands)
        chosen = min(cands, key=lambda c: c.cost_per_million_tokens)
    else:
        chosen = max(cands, key=lambda c: c.step.tokens_per_s)
    rec = _recommendation(wl, chosen, cands, choices, objective, tokens, memory)
    searched = {
        "considered": sum(c.result.considered for c in cands),
        "memory_checked": sum(c.result.memory_checked for c in cands),
        "evaluated": sum(c.result.evaluated for c in cands),
        "seconds": sum(c.result.seconds for c in cands),
        "devices": [{"device": c.target.device, "gpus": c.cluster.gpus,
                     "considered": c.result.considered, "evaluated": c.result.evaluated,
                     "tokens_per_s": c.step.tokens_per_s,
                     "cost_per_million_tokens": c.cost_per_million_tokens} for c in cands],
    }
    inputs = {"workload": wl.to_dict(), "objective": objective, "global_batch": g,
              "tokens": tokens, "choices": choices.fixed(),
              "cluster": chosen.cluster.to_dict(),
              "clusters": [c.cluster.to_dict() for c in cands],
              "target": {"device": chosen.target.device,
                         "gpus_per_node": chosen.target.gpus_per_node,
                         "nodes": chosen.target.nodes,
                         "intra_node_Bps": chosen.target.intra_node_Bps,
                         "inter_node_Bps": chosen.target.inter_node_Bps,
                         "memory_bytes": chosen.target.memory_bytes,
                         "memory_margin": chosen.target.memory_margin}}
    warnings = [f"left out: {u}" for u in unfit] + list(_warnings(wl, chosen, choices))
    return LMPlan(inputs, rec, searched, tuple(warnings), True, tuple(chosen.step.band))


def step_fields(step, cand: Candidate, tokens: float | None) -> dict[str, Any]:
    """The recommendation's figures of one step (the recommendation and each runner-up)."""
    lay: ParallelLayout = step.layout
    lo, hi = step.band
    d = {
        "device": cand.target.device, "gpus": lay.gpus, "nodes": cand.target.nodes,
        "gpus_per_node": cand.target.gpus_per_node, "seq_len": step.seq_len,
        "global_batch": lay.global_batch, "micro_batch": lay.micro_batch,
        "batch_size": lay.micro_batch, "accumulation": lay.accumulation,
        "recompute": lay.recompute, "precision": lay.precision, "layout": lay.layout,
        "zero": lay.zero, "tp": lay.tp, "pp": lay.pp, "vpp": lay.vpp, "cp": lay.cp,
        "dp": lay.dp, "schedule": lay.schedule, "sequence_parallel": lay.sequence_parallel,
        "architecture": "allreduce" if lay.zero == 0 else "fsdp",
        "describe": lay.describe(),
        "step_s": step.step_s, "step_s_low": step.step_s * (1 + lo),
        "step_s_high": step.step_s * (1 + hi),
        "tokens_per_s": step.tokens_per_s, "tokens_per_s_low": step.tokens_per_s / (1 + hi),
        "tokens_per_s_high": step.tokens_per_s / (1 + lo),
        "tokens_per_s_per_gpu": step.tokens_per_s / lay.gpus,
        "mfu": step.mfu, "hfu": step.hfu, "memory_bytes": step.memory_bytes,
        "memory": dict(step.memory), "fits": step.fits,
        "compute_s": step.compute_s, "tp_comm_s": step.tp_comm_s,
        "pp_bubble_s": step.pp_bubble_s, "pp_p2p_s": step.pp_p2p_s,
        "dp_exchange_s": step.dp_exchange_s,
        "optimizer_s": getattr(step, "optimizer_s", 0.0),
        "price_per_gpu_hour": cand.price.per_gpu_hour if cand.price else None,
        "cost_per_million_tokens": None, "train_days": None, "train_cost": None,
    }
    if cand.price is not None:
        d["cost_per_million_tokens"] = lm_theory.cost_per_million_tokens(
            step.tokens_per_s, lay.gpus, cand.price.per_gpu_hour)
    if tokens:
        d["train_days"] = lm_theory.train_seconds(tokens, step.tokens_per_s) / 86400.0
        if cand.price is not None:
            d["train_cost"] = lm_theory.train_cost(tokens, step.tokens_per_s, lay.gpus,
                                                   cand.price.per_gpu_hour)
    return d


def _recommendation(wl: LMWorkload, chosen: Candidate, cands: list[Candidate],
                    choices: Choices, objective: str, tokens: float | None, memory
                    ) -> dict[str, Any]:
    step = chosen.step
    rec = step_fields(step, chosen, tokens)
    rec["model"] = wl.name
    rec["price"] = chosen.price.to_dict() if chosen.price else None
    rec["launch"] = launch_command(wl, step.layout, chosen.target)
    rec["reasons"] = _reasons(wl, chosen, cands, choices, objective, tokens, memory)
    rec["alternatives"] = _alternatives(chosen, cands, tokens)
    rec["evaluated_only"] = choices.all_fixed()
    return rec


def _alternatives(chosen: Candidate, cands: list[Candidate], tokens) -> list[dict]:
    """The runners-up: the fastest layouts of other degrees (tp, pp, cp, dp) on the chosen
    cluster, then the best of each other cluster."""
    rec_lay = chosen.step.layout
    seen = {(rec_lay.tp, rec_lay.pp, rec_lay.cp)}
    out = []
    for s in chosen.result.ranked:
        key = (s.layout.tp, s.layout.pp, s.layout.cp)
        if key in seen:
            continue
        seen.add(key)
        out.append(step_fields(s, chosen, tokens))
        if len(out) >= ALTERNATIVES:
            break
    if len(out) < ALTERNATIVES:  # other layouts of the same degrees
        for s in chosen.result.ranked:
            if s is chosen.step or any(a["describe"] == s.layout.describe() for a in out):
                continue
            out.append(step_fields(s, chosen, tokens))
            if len(out) >= ALTERNATIVES:
                break
    for c in cands:
        if c is not chosen:
            out.append(step_fields(c.step, c, tokens))
    return out


def _reasons(wl, chosen: Candidate, cands, choices: Choices, objective: str, tokens,
             memory) -> list[str]:
    step, res, target = chosen.step, chosen.result, chosen.target
    if memory is None:
        from scalelab.plan.lm.memory import memory_per_gpu

        def memory_of(lay):
            return memory_per_gpu(wl.model, lay, step.seq_len).total
    else:
        def memory_of(lay):
            return memory(wl.model, lay, step.seq_len)
    usable = target.memory_bytes * target.memory_margin
    fixed = choices.fixed()
    out = []
    if choices.all_fixed():
        out.append(f"every choice was given: this evaluates that one configuration "
                   f"({step.layout.describe()})")
    else:
        fastest = res.ranked[0]
        head = (f"{res.considered:,} layouts of {step.layout.gpus} {target.device} GPUs "
                f"searched ({res.memory_checked:,} memory-checked, {res.evaluated:,} fit "
                f"{gib(usable)} usable per GPU and were evaluated, in "
                f"{format_s(res.seconds)})")
        if fastest is not step:
            head += (f"; the fastest ({fastest.layout.describe()}, "
                     f"{fastest.tokens_per_s:,.0f} tokens/s) is within {NEAR_TIE:.0%}: the "
                     "simpler layout is recommended")
        out.append(head + (f"; fixed: {', '.join(f'{k} {v}' for k, v in fixed.items())}"
                           if fixed else ""))
    out.append(f"step {format_s(step.step_s)} = compute {format_s(step.compute_s)} + tensor "
               f"and context collectives {format_s(step.tp_comm_s)} + pipeline bubble "
               f"{format_s(step.pp_bubble_s)} + sends {format_s(step.pp_p2p_s)} + exposed "
               f"data-parallel exchange {format_s(step.dp_exchange_s)} + optimizer "
               f"{format_s(getattr(step, 'optimizer_s', 0.0))}; {step.layout.global_batch} x "
               f"{step.seq_len} tokens per step = {step.tokens_per_s:,.0f} tokens/s")
    out.append(f"MFU {step.mfu:.1%}: tokens/s x (6N + 12 L h s) / (GPUs x peak), N = "
               f"{wl.model.non_embedding_params():,} parameters without the embedding"
               + (f"; HFU {step.hfu:.1%} with the recomputed FLOPs"
                  if step.layout.recompute != "none" else ""))
    out += degree_reasons(step, res, target, usable, memory_of)
    out += _cost_reasons(chosen, cands, objective, tokens)
    return out


def _cost_reasons(chosen: Candidate, cands, objective: str, tokens) -> list[str]:
    out = []
    if len(cands) > 1:
        figures = "; ".join(
            f"{c.target.device}: {c.step.tokens_per_s:,.0f} tokens/s on {c.cluster.gpus} GPUs"
            + (f" at ${c.price.per_gpu_hour:g}/GPU-hour = ${c.cost_per_million_tokens:.3f} "
               "per million tokens" if c.price else " (no price)") for c in cands)
        why = ("the cheapest per token" if objective == "cost" else "the fastest")
        out.append(f"{chosen.target.device} is {why}: {figures}")
    if chosen.price is not None:
        p = chosen.price
        cpm = chosen.cost_per_million_tokens
        out.append(f"cost: ${p.per_gpu_hour:g} per GPU-hour x {chosen.step.layout.gpus} GPUs "
                   f"/ {chosen.step.tokens_per_s * 3600:,.0f} tokens per hour = "
                   f"${cpm:.3f} per million tokens (price: {p.source}"
                   + (f", {p.date}" if p.date else "") + ")")
    if tokens:
        days = lm_theory.train_seconds(tokens, chosen.step.tokens_per_s) / 86400.0
        text = f"{tokens:.3g} tokens / {chosen.step.tokens_per_s:,.0f} tokens/s = {days:,.1f} days"
        if chosen.price is not None:
            cost = lm_theory.train_cost(tokens, chosen.step.tokens_per_s,
                                        chosen.step.layout.gpus, chosen.price.per_gpu_hour)
            text += f", ${cost:,.0f} on {chosen.step.layout.gpus} GPUs"
        out.append(text)
    return out


def _warnings(wl: LMWorkload, chosen: Candidate, choices: Choices) -> list[str]:
    band = f"band {chosen.step.band[0]:+.0%} to {chosen.step.band[1]:+.0%} of step_s"
    if chosen.compute_factor is None:
        out = [f"an estimate: the compute model's step for the {chosen.target.device} "
               f"({band} from held-out runs), not a measurement"]
    else:
        out = [f"an estimate from a measurement: {wl.step_s:g} s measured on the "
               f"{wl.device} at micro-batch {wl.micro_batch} scales the compute model's "
               f"compute by {chosen.compute_factor:.3f} on every layout ({band})"]
    lay = chosen.step.layout
    if lay.tp > chosen.target.gpus_per_node:
        out.append(f"tp {lay.tp} spans nodes: its collectives cross the NIC")
    if not chosen.step.fits:
        out.append(f"the configuration needs {gib(chosen.step.memory_bytes)} per GPU: it does "
                   "not fit the device")
    return out


def launch_command(wl: LMWorkload, lay: ParallelLayout, target) -> str:
    """torchrun + ``scalelab run`` for the layout, as node 0 would type it."""
    nodes = max(1, -(-lay.gpus // target.gpus_per_node))
    per_node = min(lay.gpus, target.gpus_per_node)
    arch = "allreduce" if lay.zero == 0 else f"fsdp --zero {lay.zero}"
    args = [f"--seq-len {wl.seq_len}", f"--workers {lay.gpus}", f"--architecture {arch}",
            f"--batch-size {lay.micro_batch}", f"--accumulation-steps {lay.accumulation}"]
    if lay.tp > 1:
        args.append(f"--tp {lay.tp}")
        args.append("--sequence-parallel" if lay.sequence_parallel else "--no-sequence-parallel")
    if lay.pp > 1:
        args.append(f"--pp {lay.pp} --schedule {lay.schedule}")
        if lay.vpp > 1:
            args.append(f"--vpp {lay.vpp}")
    if lay.cp > 1:
        args.append(f"--cp {lay.cp}")
    args.append(f"--recompute {lay.recompute} --precision {lay.precision} --device cuda")
    return (f"torchrun --nnodes {nodes} --nproc-per-node {per_node} --node-rank 0 "
            f"--master-addr HOST0 --master-port 29500 -m scalelab run {wl.name} "
            + " ".join(args) + " --launcher torchrun")


__all__ = ["ALTERNATIVES", "OBJECTIVES", "Candidate", "LMPlan", "default_precisions",
           "launch_command", "lm_plan", "simplicity", "step_fields"]
