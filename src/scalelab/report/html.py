"""Render one self-contained HTML report from any mix of scalelab result files.

The page needs no network: the figures are PNGs embedded as base64 data URIs and the style
sheet is inline. Files are read with :func:`scalelab.results.load_any`, so anything that is
not a scalelab result is refused with one line.
"""

from __future__ import annotations

import base64
import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from scalelab import __version__
from scalelab.errors import UsageError
from scalelab.report import cards, figures
from scalelab.report.cards import plural_text, recommendations, sweep_rows
from scalelab.report.checks import check_file
from scalelab.results import load_any, write_text_atomic

KINDS = ("profile", "plan", "run", "validation", "compare", "calibration")


@dataclass
class ReportInputs:
    """Loaded result files grouped by kind, with where each came from."""

    files: dict[str, list[dict]] = field(default_factory=lambda: {k: [] for k in KINDS})
    sources: list[tuple[str, str]] = field(default_factory=list)

    def of(self, kind: str) -> list[dict]:
        return self.files.get(kind, [])


def _model_of(data: dict) -> str | None:
    """The model a result file is about, wherever its kind keeps it."""
    for path in (("workload", "model"), ("config", "model"), ("inputs", "input", "model"),
                 ("inputs", "workload", "model"),
                 ("inputs", "model"), ("config", "workload", "model"), ("model",)):
        node: Any = data
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, str) and node:
            return node
    return None


def collect_inputs(paths: list[str | os.PathLike]) -> ReportInputs:
    """Load every file; refuse non-scalelab files and files about different models."""
    if not paths:
        raise UsageError("report needs at least one result file")
    inputs = ReportInputs()
    models: dict[str, str] = {}
    for p in paths:
        kind, data = load_any(p)
        check_file(str(p), kind, data)
        inputs.files.setdefault(kind, []).append(data)
        inputs.sources.append((str(p), data["schema"]))
        model = _model_of(data)
        if model:
            models[str(p)] = model
    if len(set(models.values())) > 1:
        listed = ", ".join(f"{Path(p).name}: {m}" for p, m in models.items())
        raise UsageError(f"files of different models cannot share one report ({listed})")
    return inputs


def _data_uri(png: bytes | None) -> str | None:
    return None if png is None else "data:image/png;base64," + base64.b64encode(png).decode()


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _fmt_s(s: float | None) -> str:
    from scalelab.plan import format_s

    return "-" if s is None else format_s(s)


def _profile_table(profile: dict) -> list[list[str]]:
    rows = []
    for r in sorted(profile.get("batches", []), key=lambda r: r.get("batch_size", 0)):
        rows.append([str(r.get("batch_size")), _fmt_s(r.get("forward_s")),
                     _fmt_s(r.get("backward_s")), _fmt_s(r.get("optimizer_s")),
                     _fmt_s(r.get("step_s")), f"{r.get('samples_per_s') or 0:.1f}",
                     _fmt_bytes(r.get("peak_memory_bytes"))])
    return rows


def batch_caption(profile: dict) -> str:
    """What the batch figure draws, and only that."""
    from scalelab.report.figures._style import memory_budget_drawn

    fit = (profile.get("fit") or {}).get("step_s") or {}
    left = ["step time (each point the median of the timed steps after warm-up)"]
    if "intercept" in fit and "per_sample" in fit:
        left.append("its linear fit (dashed)")
    if any(r.get("samples_per_s") for r in profile.get("batches", [])):
        left.append("samples/s (dotted, right axis)")
    right = "peak memory" + (" and the memory budget (dashed)" if memory_budget_drawn(profile)
                             else "")
    text = f"Left: {', '.join(left)}. Right: {right}."
    if profile.get("recommended_batch_size"):
        text += " The vertical dotted line is the chosen batch."
    return text + "".join(f" Warning: {w}" for w in profile.get("warnings", []))


def scaling_caption(plans: list[dict], runs: list[dict], validations: list[dict]) -> str:
    from scalelab.report.figures.plan import _measured_speedups

    text = ("Predicted by the planner for each architecture and cluster (one line style per "
            "cluster); the grey line is linear speedup")
    if any((p.get("inputs") or {}).get("options", {}).get("target_efficiency") for p in plans):
        text += ", the dashed line the target efficiency"
    text += "."
    if _measured_speedups(runs, validations):
        text += " Dots are measured runs."
    small = [cards.plan_label(p) for p in plans
             if (p.get("recommendation") or {}).get("too_small")]
    if small:  # the headline's story: no throughput for a step too small to matter
        text += (f" For {', '.join(small)} one step is too small for the cluster to matter: "
                 "those curves are upper bounds, not a forecast.")
    return text


def _validation_rows(validations: list[dict]) -> list[list[str]]:
    rows = []
    for v in validations:
        for c in v.get("cases", []):
            cfg = c.get("config", {})
            err = c.get("error")
            rows.append([" ".join(f"{k}={val}" for k, val in cfg.items() if val is not None),
                         _fmt_s(c.get("predicted_step_s")), _fmt_s(c.get("measured_step_s")),
                         f"{err * 100:+.1f}%" if isinstance(err, (int, float)) else "-"])
    return rows


def _environment(inputs: ReportInputs) -> dict:
    for kind in ("profile", "run", "validation", "compare", "plan"):
        for data in inputs.of(kind):
            env = data.get("environment")
            if isinstance(env, dict) and env:
                return env
    try:
        from scalelab.environment import collect_environment

        return collect_environment("cpu")
    except Exception:  # noqa: BLE001 - the report renders without the environment
        return {}


def check_text(check: dict) -> str:
    """A ``--check`` of the model on this machine, labelled as what it is."""
    ran = check.get("ran") or {}
    pred, meas = check.get("predicted_samples_per_s"), check.get("measured_samples_per_s")
    err = check.get("error")
    text = (f"{check.get('label', 'check of the model on this machine')}: "
            f"{ran.get('architecture', '?')} with {check.get('why', '?')}, batch "
            f"{ran.get('batch_size', '?')}, on loopback")
    if isinstance(pred, (int, float)) and isinstance(meas, (int, float)):
        text += f": predicted {pred:,.1f} samples/s, measured {meas:,.1f} samples/s"
    if isinstance(err, (int, float)):
        text += f" (step-time error {err * 100:+.1f}%)"
    return text


def _summary(validations: list[dict], runs: list[dict]) -> list[str]:
    summary = []
    for v in validations:
        if isinstance(v.get("check"), dict):
            summary.append(check_text(v["check"]))
        elif v.get("median_abs_error") is not None:
            summary.append(f"validation: median |error| {v['median_abs_error'] * 100:.1f}%, "
                           f"max {v.get('max_abs_error', 0) * 100:.1f}% over "
                           f"{plural_text(len(v.get('cases', [])), 'case')}")
    for r in runs:
        cfg = r.get("config", {})
        if r.get("samples_per_s"):
            summary.append(f"run: {cfg.get('architecture', '?')} with "
                           f"{plural_text(cfg.get('workers', '?'), 'worker')}, "
                           f"{r['samples_per_s']:.1f} samples/s measured")
    return summary


def render_report(inputs: ReportInputs, title: str | None = None) -> str:
    """The report as one HTML string."""
    profiles, runs = inputs.of("profile"), inputs.of("run")
    # a language model's plan has no sweep over device counts: its card says it all
    plans = [p for p in inputs.of("plan") if p.get("kind") != "language-model"]
    validations, compares = inputs.of("validation"), inputs.of("compare")
    model = next((m for m in map(_model_of, sum(inputs.files.values(), [])) if m), None)
    sections = []

    def add(sid, heading, png, caption, table=None, header=None):
        if png is None and not table:
            return
        sections.append({"id": sid, "heading": heading, "img": _data_uri(png),
                         "caption": caption, "table": table, "header": header})

    for prof in profiles[:1]:
        add("batch", "Step time and memory against batch size", figures.batch_scaling(prof),
            batch_caption(prof), _profile_table(prof),
            ["batch", "forward", "backward", "optimizer", "step", "samples/s", "peak memory"])
        add("algorithms", "Computation configurations", figures.algorithms(prof),
            "Step time of each candidate at the chosen batch; hatched bars do not fit the "
            "memory budget.")
    sweep, sweep_header = sweep_rows(plans)
    add("scaling", "Speedup and efficiency against device count",
        figures.scaling(plans, runs, validations), scaling_caption(plans, runs, validations),
        sweep, sweep_header)
    add("breakdown", "Where a step's time goes", figures.breakdown(plans, runs, validations),
        "Compute, input, push, server apply and pull per step, predicted beside measured.")
    checks = bool(validations) and all(isinstance(v.get("check"), dict) for v in validations)
    add("validation", "Check of the model on this machine" if checks
        else "Predicted against measured", figures.validation(validations),
        ("The recommendation scaled to this machine, run for real on loopback beside the "
         "model's prediction for exactly that run (compute, contention and link measured "
         "here): a check of the model, not a validation of the cluster plan. "
         if checks else "Each point is one configuration run for real. ")
        + "The band is ±10%; step times.",
        _validation_rows(validations), ["configuration", "predicted", "measured", "error"])
    add("compare", "Naive against recommended", figures.compare(compares),
        "The baseline, then the recommendations applied one at a time in the paper's order.")

    summary = _summary(validations, runs)

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("scalelab.report", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
    )
    return env.get_template("report.html").render(
        title=title or f"scalelab report{f': {model}' if model else ''}",
        model=model,
        recommendations=recommendations(inputs.of("plan"), inputs.of("profile")),
        sections=sections,
        summary=summary,
        environment=_environment(inputs),
        sources=inputs.sources,
        version=__version__,
        generated=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def write_report(paths: list[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Load ``paths``, render, and write ``out`` atomically."""
    inputs = collect_inputs(paths)
    try:
        html = render_report(inputs)
    except UsageError:
        raise
    except _MALFORMED as e:
        raise UsageError(_culprit(paths, e)) from None
    return write_text_atomic(out, html)


# What reading a field of the wrong kind raises (a file edited by hand, or cut short)
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def _culprit(paths: list[str | os.PathLike], error: Exception) -> str:
    """The line for a report that could not be made of ``paths``: the first file that
    cannot be reported alone, and why. Where every file can be, ``error`` is raised as it
    was (the fault is the report's own, not a file's)."""
    for p in paths:
        try:
            render_report(collect_inputs([p]))
        except UsageError:
            raise
        except _MALFORMED as e:
            return (f"{p}: cannot be reported: a field of the wrong kind "
                    f"({type(e).__name__}: {e})")
    raise error
