"""Fit the language-model step model's compute factors on published runs, and hold it out.

Two sets (``../shared/data/lm``, described in its README):

- ``llmfoundry-mpt-a100.csv``: MosaicML llm-foundry, MPT models 125M-70B, PyTorch FSDP
  FULL_SHARD in bf16 on A100 40/80 GB, 8-512 GPUs, 1,600 Gb/s RoCE per node (25 GB/s per
  GPU of the node's eight), with and without activation checkpointing: the ``pytorch``
  stack (a fused attention kernel, gradients reduced in fp32).
- ``vtrain-single-node-a100.csv``: vTrain's Megatron-DeepSpeed runs on one node of 8 A100s
  (150 GB/s between GPUs, its validation configs), tensor 1-8, pipeline 1-4 (1F1B), data
  parallel 1-8, full recomputation: the ``megatron`` stack. Its precision (fp16), vocabulary
  (GPT-2's 50,257 padded to 50,304) and device (A100 SXM 80 GB) are assumptions, as the
  README says; rows with fewer micro-batches than stages are run as GPipe (1F1B with m < p
  has no steady state: its bubble and order are GPipe's).

The model is linear in its factors: a step is ``F . c`` with ``c = (1/e_matmul,
1/e_attention, 1/e_memory, layer_s, 1/e_comm, step_s, collective_s, p2p_s, pass_s)`` and F
the :class:`~scalelab.plan.lm.step.Terms` of the row, plus latency; so a fit is weighted
least squares on the relative error ``(F c - y) / y``, bounds held by fixing a factor that
leaves its range and solving again. ZeRO-3's per-block exchange hidden behind each block's
compute (:func:`~scalelab.plan.lm.step.zero3_exposed_s`) is not linear: it is evaluated at
the previous iteration's factors, and FSDP's ``comm`` (which enters only through it) is
fitted by a one-dimensional search around that least squares (:data:`PROFILED`); on the
megatron stack ``comm`` is one of the linear factors (its exchanges are exposed).

Held out: leave one *model* out for llm-foundry (every row of that model refitted without
it), leave one *row* out for vTrain. ``python -m scalelab.plan.lm.fit`` writes
``scalelab/hardware/lm_fit.json`` with the data's digest.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from scalelab.hardware import lm_fit
from scalelab.models.config import TransformerConfig
from scalelab.parallel import ParallelLayout
from scalelab.plan.lm import compute as lmc
from scalelab.plan.lm.step import LMTarget, Terms, p2p_link_bound_s, step_seconds, terms

DATA = Path("../shared/data/lm")
FILES = {"pytorch": "llmfoundry-mpt-a100.csv", "megatron": "vtrain-single-node-a100.csv"}
FITTED = {"pytorch": ("matmul", "attention", "memory", "layer_s", "step_s", "pass_s"),
          "megatron": ("matmul", "memory", "layer_s", "comm", "step_s", "collective_s",
                       "p2p_s", "pass_s")}
INVERSE = {"matmul", "attention", "memory", "comm"}   # fitted as 1/e
NVLINK3_Bps = 300e9          # catalog nvlink3, per direction
ROCE_PER_GPU_Bps = 1600e9 / 8 / 8   # 1,600 Gb/s per node over its 8 GPUs
VTRAIN_INTRA_Bps = 300e9   # the catalog's nvlink3 (A100 SXM), per direction
VTRAIN_RECOMPUTE = "full"
MEGATRON_VOCAB = 50304      # GPT-2's 50,257 padded to a multiple of 128 (Megatron's default)


@dataclass(frozen=True)
class Case:
    """One published row: what ran, and its measured step."""

    group: str           # the held-out unit: the model (llm-foundry) or the row (vTrain)
    label: str
    model: TransformerConfig
    layout: ParallelLayout
    seq_len: int
    target: LMTarget
    stack: str
    measured_s: float


def data_digest(data: Path = DATA) -> str:
    h = hashlib.sha256()
    for name in sorted(FILES.values()):
        h.update((data / name).read_bytes())
    return h.hexdigest()


def llmfoundry_cases(path: Path) -> list[Case]:
    out = []
    for i, r in enumerate(csv.DictReader(path.open())):
        gpus, gbs, mbs, seq = int(r["gpus"]), int(r["gbs"]), int(r["mbs"]), int(r["seq"])
        cfg = TransformerConfig(r["model"], "gpt2", layers=int(r["layers"]),
                                hidden=int(r["hidden"]), heads=int(r["heads"]),
                                vocab=int(r["vocab"]), ffn=int(r["ffn"]), max_seq=seq,
                                tied=True, source="llm-foundry benchmark table")
        lay = ParallelLayout(dp=gpus, zero=3, micro_batch=mbs,
                             accumulation=gbs // (mbs * gpus), recompute=r["recompute"],
                             precision="bf16")
        dev = "A100-SXM-80GB" if "80gb" in r["gpu"] else "A100-SXM-40GB"
        target = LMTarget(dev, 8, max(1, gpus // 8), NVLINK3_Bps, ROCE_PER_GPU_Bps)
        measured = gbs * seq / (float(r["value"]) * gpus)
        out.append(Case(r["model"], f"{r['model']} {dev} s{seq} mb{mbs} x{gpus} "
                        f"{r['recompute']} (row {i + 2})", cfg, lay, seq, target,
                        "pytorch", measured))
    return out


def vtrain_cases(path: Path) -> list[Case]:
    out = []
    target = LMTarget("A100-SXM-80GB", 8, 1, VTRAIN_INTRA_Bps, VTRAIN_INTRA_Bps)
    for i, r in enumerate(csv.DictReader(path.open())):
        gbs, mbs = int(r["global batch"]), int(r["micro batch"])
        tp, dp, pp = (int(r["tensor parallelism"]), int(r["data parallelism"]),
                      int(r["pipeline parallelism"]))
        seq, h, layers = int(r["sequence length"]), int(r["hidden size"]), int(r["# layers"])
        cfg = TransformerConfig(f"gpt-h{h}-l{layers}", "gpt2", layers=layers, hidden=h,
                                heads=int(r["attention heads"]), vocab=MEGATRON_VOCAB,
                                max_seq=seq, tied=True, source="vTrain ground truth")
        m = gbs // (mbs * dp)
        lay = ParallelLayout(dp=dp, tp=tp, pp=pp, micro_batch=mbs, accumulation=m,
                             recompute=VTRAIN_RECOMPUTE, precision="fp16",
                             schedule="1f1b" if m >= pp else "gpipe")
        out.append(Case(f"row{i + 2}", f"h{h} L{layers} tp{tp} pp{pp} dp{dp} mb{mbs} "
                        f"gbs{gbs} (row {i + 2})", cfg, lay, seq, target, "megatron",
                        float(r["iteration time (ms)"]) / 1e3))
    return out


def cases(data: Path = DATA) -> dict[str, list[Case]]:
    """{stack: its cases}; ``ValueError`` naming the folder when the files are missing."""
    missing = [n for n in FILES.values() if not (data / n).is_file()]
    if missing:
        raise ValueError(f"{data} lacks {', '.join(missing)}")
    return {"pytorch": llmfoundry_cases(data / FILES["pytorch"]),
            "megatron": vtrain_cases(data / FILES["megatron"])}


# -- the linear fit ----------------------------------------------------------------------
def _base(stack: str) -> lm_fit.Efficiency:
    """The start: round figures, and a host time per layer pass that puts the small
    micro-batches on the host's side (from 0, no row would be)."""
    overlap = 0.0 if stack == "megatron" else 1.0
    return lm_fit.Efficiency(overlap=overlap, layer_s=5e-4)


_COLUMNS = ("matmul", "attention", "memory", "layer_s", "comm", "step_s", "collective_s",
            "p2p_s", "pass_s")


def _features(t: Terms, eff: lm_fit.Efficiency) -> tuple[list[float], float]:
    """(F over :data:`_COLUMNS`, constant) of ``t``: each micro-batch on the side (device
    or host) that sets it at the current ``eff``, which also fixes the non-linear ZeRO-3
    overlap and the factors not fitted."""
    k = t.micro_batches * (1.0 + t.bubble)
    f = [0.0] * len(_COLUMNS)
    const = 0.0
    tp_bytes = t.tp_s / eff.comm + t.tp_latency_s + t.tp_steps * eff.collective_s
    for w, kw in ((t.micro_batch, t.micro_batches), (t.other_stage, t.micro_batches * t.bubble)):
        if lmc.device_s(w, eff) + tp_bytes >= lmc.host_s(w, eff):
            for i in range(3):
                f[i] += kw * w[i]
            f[8] += kw * w[3]
            f[4] += kw * t.tp_s
            f[6] += kw * t.tp_steps
            const += kw * t.tp_latency_s
        else:
            f[3] += kw * w[3]
    f[7] = k if t.bubble > 0 else 0.0
    f[4] += t.p2p_s
    const += t.p2p_latency_s + p2p_link_bound_s(t, eff)   # at eff (not linear; 0 on a fast link)
    if t.dp_per_micro_batch or eff.overlap > 0:
        const += step_seconds(t, eff)[4]           # evaluated at eff (not linear)
    else:
        f[4] += t.dp_s
        const += t.dp_latency_s
    for i in range(3):
        f[i] += t.optimizer[i]
    f[5] = 1.0
    return f, const


def _coef(eff: lm_fit.Efficiency, name: str) -> float:
    v = getattr(eff, name)
    return 1.0 / v if name in INVERSE else v


def _solve(F: np.ndarray, const: np.ndarray, y: np.ndarray, eff: lm_fit.Efficiency,
           names: tuple[str, ...]) -> lm_fit.Efficiency:
    """Weighted least squares of (F c + const - y) / y over ``names``, the other factors
    held at ``eff``; a factor leaving its range is fixed at the bound and the rest
    solved again."""
    free = list(names)
    fixed = {n: _coef(eff, n) for n in _COLUMNS if n not in names}
    while True:
        idx = [_COLUMNS.index(n) for n in free]
        rest = [i for i in range(len(_COLUMNS)) if _COLUMNS[i] not in free]
        off = const + F[:, rest] @ np.array([fixed[_COLUMNS[i]] for i in rest])
        A = F[:, idx] / y[:, None]
        c, *_ = np.linalg.lstsq(A, 1.0 - off / y, rcond=None)
        bad = [(n, v) for n, v in zip(free, c)
               if (n in INVERSE and v < 1.0) or (n not in INVERSE and v < 0.0)]
        if not bad:
            vals = dict(zip(free, c)) | fixed
            return replace(eff, **{n: float(1.0 / vals[n] if n in INVERSE else vals[n])
                                   for n in _COLUMNS})
        n, v = bad[0]
        fixed[n] = 1.0 if n in INVERSE else 0.0
        free.remove(n)


#: factors fitted by a one-dimensional search (the others by least squares at each value):
#: FSDP's link fraction ``comm`` enters only through ``max(0, collective - compute)`` per
#: block (:func:`scalelab.plan.lm.step.zero3_exposed_s`), which is not linear in it
PROFILED = {"pytorch": "comm"}
_PROFILE_RANGE = (0.05, 1.0)


def fit(stack: str, rows: list[Case], iterations: int = 6) -> lm_fit.Efficiency:
    """The factors of ``stack`` fitted on ``rows`` (module docstring); a factor of
    :data:`PROFILED` by the least relative squared error over a log grid, refined by
    golden section."""
    name = PROFILED.get(stack)
    ts = [terms(c.model, c.layout, c.seq_len, c.target, stack) for c in rows]
    y = np.array([c.measured_s for c in rows])
    if name is None:
        return _fit_at(stack, ts, y, _base(stack), iterations)

    def at(v: float) -> tuple[float, lm_fit.Efficiency]:
        eff = _fit_at(stack, ts, y, replace(_base(stack), **{name: v}), iterations)
        r = np.array([step_seconds(t, eff)[-1] for t in ts]) / y - 1.0
        return float(r @ r), eff

    lo, hi = np.log(_PROFILE_RANGE[0]), np.log(_PROFILE_RANGE[1])
    grid = np.linspace(lo, hi, 16)
    errs = [at(float(np.exp(g)))[0] for g in grid]
    i = int(np.argmin(errs))
    a, b = grid[max(0, i - 1)], grid[min(len(grid) - 1, i + 1)]
    g = (np.sqrt(5.0) - 1.0) / 2.0
    for _ in range(12):
        c, d = b - g * (b - a), a + g * (b - a)
        if at(float(np.exp(c)))[0] <= at(float(np.exp(d)))[0]:
            b = d
        else:
            a = c
    return at(float(np.exp((a + b) / 2.0)))[1]


def _fit_at(stack: str, ts: list[Terms], y: np.ndarray, eff: lm_fit.Efficiency,
            iterations: int) -> lm_fit.Efficiency:
    for _ in range(iterations):
        feats = [_features(t, eff) for t in ts]
        F = np.array([f for f, _ in feats])
        const = np.array([k for _, k in feats])
        eff = _solve(F, const, y, eff, FITTED[stack])
    return eff


def predict(case: Case, eff: lm_fit.Efficiency) -> float:
    t = terms(case.model, case.layout, case.seq_len, case.target, case.stack)
    return step_seconds(t, eff)[-1]


def held_out(stack: str, rows: list[Case]) -> list[tuple[Case, float]]:
    """(case, relative error of its step predicted by a fit without it): leave one model
    out for ``pytorch`` (refitted per model), leave one row out for ``megatron``."""
    if stack == "megatron":
        return _leave_one_row_out(stack, rows)
    out = []
    for g in sorted({c.group for c in rows}):
        eff = fit(stack, [c for c in rows if c.group != g])
        out += [(c, predict(c, eff) / c.measured_s - 1.0) for c in rows if c.group == g]
    return out


def _leave_one_row_out(stack: str, rows: list[Case]) -> list[tuple[Case, float]]:
    """Leave-one-out of the weighted least squares in closed form: with A the rows'
    features over their measured steps and H = A (A^T A)^-1 A^T, the residual of row i
    fitted without it is ``r_i / (1 - H_ii)`` (the PRESS residual). Each row's side (host
    or device) and the factors held at a bound are those of the fit on every row."""
    eff = fit(stack, rows)
    ts = [terms(c.model, c.layout, c.seq_len, c.target, stack) for c in rows]
    y = np.array([c.measured_s for c in rows])
    feats = [_features(t, eff) for t in ts]
    F = np.array([f for f, _ in feats])
    const = np.array([k for _, k in feats])
    free = [i for i, n in enumerate(_COLUMNS) if n in FITTED[stack]
            and not (n in INVERSE and _coef(eff, n) <= 1.0 + 1e-12)
            and not (n not in INVERSE and _coef(eff, n) <= 0.0)]
    fixed = [i for i in range(len(_COLUMNS)) if i not in free]
    off = const + F[:, fixed] @ np.array([_coef(eff, _COLUMNS[i]) for i in fixed])
    A = F[:, free] / y[:, None]
    b = 1.0 - off / y
    c, *_ = np.linalg.lstsq(A, b, rcond=None)
    h = np.einsum("ij,jk,ik->i", A, np.linalg.pinv(A.T @ A), A)
    r = b - A @ c                       # relative residual: 1 - prediction / measured
    loo = r / (1.0 - h)
    return [(case, float(-e)) for case, e in zip(rows, loo)]


def summary(errors: list[float]) -> dict:
    a = [abs(e) for e in errors]
    return {"rows": len(a), "median": float(statistics.median(a)), "worst": float(max(a))}


def build(data: Path = DATA) -> dict:
    """The packaged file's content: every stack's fit on all its rows, its held-out
    figures and band."""
    out = {"data_digest": data_digest(data), "stacks": {}}
    for stack, rows in cases(data).items():
        eff = fit(stack, rows)
        ho = held_out(stack, rows)
        errs = [e for _, e in ho]
        # the band of the measured step around the prediction, from the held-out rows
        rel = [1.0 / (1.0 + e) - 1.0 for e in errs]
        out["stacks"][stack] = {
            "efficiency": eff.to_dict(),
            "band": [min(rel), max(rel)],
            "fitted_on": f"{FILES[stack]}, {len(rows)} rows",
            "source": ("llm-foundry benchmarking README (A100 40/80 GB)" if stack == "pytorch"
                       else "vTrain ground_truth_single.csv (A100, one node)"),
            "held_out": {"unit": "model" if stack == "pytorch" else "row", **summary(errs)},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scalelab.plan.lm.fit",
                                 description="Refit the language-model compute factors.")
    ap.add_argument("--data", type=Path, default=DATA, help="folder of the two CSV files")
    ap.add_argument("--out", type=Path,
                    default=Path(lm_fit.__file__).with_name(lm_fit.FIT_FILE))
    args = ap.parse_args(argv)
    try:
        content = build(args.data)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(content, indent=1, sort_keys=True) + "\n")
    for stack, d in content["stacks"].items():
        ho = d["held_out"]
        print(f"{stack}: {d['efficiency']} held out by {ho['unit']}: median "
              f"{ho['median']:.1%}, worst {ho['worst']:.1%} ({ho['rows']} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
