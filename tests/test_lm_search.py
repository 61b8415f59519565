"""The language-model search against a step model small enough to check by hand: every
layout counted, the pruning exact, fixed choices kept, bad choices one line."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from scalelab.errors import UsageError
from scalelab.models.config import TransformerConfig
from scalelab.parallel import ParallelLayout
from scalelab.plan.lm.inputs import LMWorkload, parse_tokens
from scalelab.plan.lm.prices import catalog_prices, price_of
from scalelab.plan.lm.search import search
from scalelab.plan.lm.space import MAX_MICRO_TOKENS, MIN_CP_CHUNK, VPP_CHOICES, Choices

CFG = TransformerConfig(name="toy", style="llama", layers=8, hidden=256, heads=8,
                        kv_heads=4, vocab=1000, ffn=512, max_seq=4096)
SEQ, BATCH, GPUS = 2048, 16, 16
USABLE = 100.0
FREE = Choices()


@dataclass(frozen=True)
class Step:
    layout: ParallelLayout
    step_s: float
    tokens_per_s: float
    memory_bytes: float
    fits: bool


def memory(cfg, lay, seq):
    """State shrinks with tp, pp and the ZeRO level; activations grow with the micro-batch
    and the micro-batches in flight, shrink with recomputation, sp and cp."""
    state = 400.0 / (lay.tp * lay.pp) / (1 + lay.zero * (lay.dp - 1) / 3)
    flight = min(lay.pp, lay.accumulation) if lay.schedule != "gpipe" else lay.accumulation
    act = {"none": 8.0, "selective": 5.0, "full": 1.0}[lay.recompute]
    act *= lay.micro_batch * flight / (lay.tp if lay.sequence_parallel else 1) / lay.cp
    return state + act


def evaluate(cfg, lay, seq, target):
    compute = 64.0 / lay.gpus * {"none": 1.0, "selective": 1.05, "full": 1.33}[lay.recompute]
    compute *= 1 + 0.5 / lay.micro_batch
    comm = 0.02 * (lay.tp - 1) + 0.01 * (lay.cp - 1) + 0.001 * lay.zero
    bubble = (lay.pp - 1) / (lay.vpp * lay.accumulation) * compute
    step_s = compute + comm + bubble + (0.0005 if lay.sequence_parallel else 0.0)
    mem = memory(cfg, lay, seq)
    return Step(lay, step_s, lay.global_batch * seq / step_s, mem, mem <= USABLE)


def brute_force(ch: Choices = FREE):
    """Every layout by the rules written out plainly, with its memory."""
    out = []
    divisors = [d for d in range(1, GPUS + 1) if GPUS % d == 0]
    for tp, pp, cp in itertools.product(divisors, repeat=3):
        if GPUS % (tp * pp * cp) or CFG.heads % tp or CFG.kv_heads % tp or CFG.ffn % tp:
            continue
        if pp > CFG.layers or (cp > 1 and (SEQ % (2 * cp) or SEQ // (2 * cp) < MIN_CP_CHUNK)):
            continue
        dp = GPUS // (tp * pp * cp)
        if BATCH % dp:
            continue
        per = BATCH // dp
        for mb in (m for m in range(1, per + 1) if per % m == 0
                   and m <= MAX_MICRO_TOKENS // SEQ):
            k = per // mb
            shapes = [("1f1b", 1)] if pp == 1 else (
                [("gpipe", 1)] + ([("1f1b", 1)] if k >= pp else [])
                + [("interleaved", v) for v in VPP_CHOICES
                   if k >= pp and k % pp == 0 and pp * v <= CFG.layers])
            for (sched, vpp), zero, sp, rc in itertools.product(
                    shapes, range(4) if dp > 1 else [0], [False, True] if tp > 1 else [False],
                    ["none", "selective", "full"]):
                lay = ParallelLayout(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero,
                                     sequence_parallel=sp, schedule=sched, vpp=vpp,
                                     micro_batch=mb, accumulation=k, recompute=rc)
                if all(getattr(lay, key) == v for key, v in ch.fixed().items()
                       if key != "layout") and (ch.layout is None or lay.layout == ch.layout):
                    out.append(lay)
    return out


def run(ch: Choices = FREE):
    return search(CFG, SEQ, BATCH, GPUS, None, ch, ("bf16",), USABLE, evaluate=evaluate,
                  memory=memory)


def test_every_layout_is_counted_and_the_fastest_found():
    every = brute_force()
    res = run()
    assert res.considered == len(every) > 500
    fitting = [evaluate(CFG, lay, SEQ, None) for lay in every]
    fitting = [s for s in fitting if s.fits]
    best = min(s.step_s for s in fitting)
    assert res.ranked[0].step_s == pytest.approx(best)
    # memory first: fewer checks than layouts, and only fitting layouts were evaluated
    assert res.memory_checked < res.considered
    assert res.evaluated <= len(fitting)
    assert all(s.fits for s in res.ranked)
    assert [s.step_s for s in res.ranked] == sorted(s.step_s for s in res.ranked)


def test_near_tie_prefers_the_simpler():
    res = run()
    chosen = res.choose()
    assert chosen.step_s <= res.ranked[0].step_s * 1.02
    exact = res.choose(near_tie=0.0)
    assert exact.step_s == res.ranked[0].step_s


def test_best_by_choice_is_the_fastest_at_each_value():
    every = [evaluate(CFG, lay, SEQ, None) for lay in brute_force()]
    res = run()
    for tp, step in res.best_by["tp"].items():
        assert step.step_s == pytest.approx(min(s.step_s for s in every
                                                if s.fits and s.layout.tp == tp))


def test_fixed_choices_are_kept():
    ch = Choices(tp=2, pp=2, schedule="interleaved", vpp=2, layout="zero1")
    res = run(ch)
    assert res.considered == len(brute_force(ch)) > 0
    for s in res.ranked:
        lay = s.layout
        assert (lay.tp, lay.pp, lay.schedule, lay.vpp, lay.zero) == (2, 2, "interleaved", 2, 1)


def test_all_fixed_evaluates_one():
    ch = Choices(tp=2, pp=2, cp=1, schedule="1f1b", sequence_parallel=True, micro_batch=1,
                 layout="zero1", recompute="full", precision="bf16")
    assert ch.all_fixed()
    res = run(ch)
    assert res.considered == 1 and len(res.ranked) == 1
    assert res.ranked[0].layout.dp == 4 and res.ranked[0].layout.accumulation == 4


@pytest.mark.parametrize("ch, words", [
    (Choices(tp=3), "does not divide toy's 8 attention heads"),
    (Choices(tp=8), "4 key/value heads"),
    (Choices(pp=16), "more pipeline stages than toy's 8 layers"),
    (Choices(tp=2, pp=2, cp=8), "does not divide the cluster's 16 GPUs"),
    (Choices(vpp=2, schedule="1f1b"), "needs the interleaved schedule"),
    (Choices(pp=4, accumulation=2, schedule="1f1b"), "needs at least 4 micro-batches"),
    (Choices(cp=3), "not divisible by 6"),
    (Choices(sequence_parallel=True, tp=1), "needs --tp > 1"),
    (Choices(tp=2, pp=2, cp=1, micro_batch=3), "does not divide the 4 sequences"),
])
def test_bad_choices_are_one_line(ch, words):
    with pytest.raises(UsageError, match=words) as e:
        run(ch)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text, value", [("2T", 2e12), ("300B", 3e11), ("1e12", 1e12),
                                         ("1.5t", 1.5e12), ("2,000,000", 2e6), (5000, 5e3)])
def test_token_counts(text, value):
    assert parse_tokens(text) == value


@pytest.mark.parametrize("text", ["0", "-5", "abc", "2X", "nan", "0.5", True])
def test_bad_token_counts(text):
    with pytest.raises(UsageError, match="positive count of tokens"):
        parse_tokens(text)


def test_seq_len_beyond_positions():
    with pytest.raises(UsageError, match="beyond toy's 4096 positions"):
        LMWorkload(CFG, "toy", seq_len=8192)


def test_prices_have_sources_and_dates_and_the_cluster_wins():
    from scalelab.plan import Cluster

    prices = catalog_prices()
    assert {"H100-SXM", "A100-SXM-40GB"} <= set(prices)
    for p in prices.values():
        assert p.per_gpu_hour > 0 and p.source and p.date
    assert price_of(Cluster(device="H100-SXM")).per_gpu_hour == prices["H100-SXM"].per_gpu_hour
    assert price_of(Cluster(device="H100-SXM", price_per_gpu_hour=1.5)).per_gpu_hour == 1.5
    assert price_of(Cluster(device="A100-SXM-80GB")) is None
