"""Published measurements against the model: every point with its error.

Cross-device: for every pair of held-out single-GPU measurements of one software stack
(tests/data/published_holdout.toml, not used by the fit), the target GPU's throughput is
predicted from the source GPU's, once with the packaged reference fit and once leaving the
target device (and any device with the same peaks and bandwidth) out of the fit. Each row
shows the prediction, the published figure, the error and the estimate's band.

Same node: the published 1 -> 2/4/8 GPU throughputs of tests/data/published_scaling.toml
with their measured speedup and efficiency; a predicted column is added to this table by
passing a predictor to :func:`same_node_table` (see ``SAME_NODE_PREDICTOR``).

    python benchmarks/published_fidelity.py --out bench-out/published_fidelity.json
"""

from __future__ import annotations

import argparse
import json
import tomllib
from collections.abc import Callable
from pathlib import Path

from scalelab.experiment import published
from scalelab.hardware import fidelity
from scalelab.hardware.reference import load_points
from scalelab.results import write_text_atomic

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"

# A function (series dict, gpus) -> predicted samples/s for the same-node table: the plan,
# from each series' 1-GPU throughput (scalelab.experiment.published).
SAME_NODE_PREDICTOR: Callable[[dict, int], float] | None = published.predict_point


def cross_device_table(mode: str) -> dict:
    results = fidelity.cross_device(load_points(DATA / "published_holdout.toml"), mode)
    median, worst = fidelity.summary(results)
    rows = [{
        "group": r.source.group, "source_device": r.source.device,
        "source_precision": r.source.precision, "source_batch": r.source.batch,
        "source_samples_per_s": r.source.samples_per_s, "target_device": r.target.device,
        "target_precision": r.target.precision, "target_batch": r.target.batch,
        "published_samples_per_s": r.target.samples_per_s,
        "predicted_samples_per_s": r.predicted_samples_per_s, "error": r.error,
        "band": r.band, "within_band": abs(r.error) <= r.band,
    } for r in results]
    return {"mode": mode, "pairs": len(rows), "median_abs_error": median,
            "max_abs_error": worst,
            "within_band": sum(r["within_band"] for r in rows) / len(rows), "rows": rows}


def print_cross_device(table: dict) -> None:
    title = {"fit": "packaged fit", "lodo": "target device left out of the fit"}
    print(f"\ncross-device, {title[table['mode']]}: {table['pairs']} pairs")
    print(f"{'group':20} {'from':16} {'to':16} {'prec':5} {'pred/s':>8} {'published':>9} "
          f"{'error':>7} {'band':>5}")
    for r in table["rows"]:
        print(f"{r['group']:20} {r['source_device']:16} {r['target_device']:16} "
              f"{r['target_precision']:5} {r['predicted_samples_per_s']:8.0f} "
              f"{r['published_samples_per_s']:9.0f} {r['error']:+7.1%} {r['band']:5.0%}")
    print(f"median |error| {table['median_abs_error']:.1%}, max {table['max_abs_error']:.1%}, "
          f"within band {table['within_band']:.0%}")


def lomo_table() -> dict:
    """Leave one model out of the reference fit: each model's points, predicted unanchored."""
    results = fidelity.leave_one_model_out()
    rows = [{"group": r.point.group, "model": r.point.model, "device": r.point.device,
             "precision": r.point.precision, "batch": r.point.batch,
             "measured_step_s": r.point.step_s, "predicted_step_s": r.predicted_step_s,
             "error": r.error, "host_bound": r.host_bound} for r in results]
    out = {"points": len(rows), "rows": rows}
    for name, sel in (("all", rows), ("device_bound", [r for r in rows if not r["host_bound"]]),
                      ("host_bound", [r for r in rows if r["host_bound"]])):
        if sel:
            med, worst = fidelity.error_summary([r["error"] for r in sel])
            out[name] = {"points": len(sel), "median_abs_error": med, "max_abs_error": worst}
    return out


def print_lomo(table: dict) -> None:
    print(f"\nleave one model out of the fit (unanchored roofline + host): {table['points']} "
          "points")
    print(f"{'group':20} {'model':18} {'device':14} {'prec':5} {'batch':>5} {'meas ms':>8} "
          f"{'pred ms':>8} {'error':>7} host")
    for r in table["rows"]:
        print(f"{r['group']:20} {r['model']:18} {r['device']:14} {r['precision']:5} "
              f"{r['batch']:5d} {r['measured_step_s'] * 1e3:8.1f} "
              f"{r['predicted_step_s'] * 1e3:8.1f} {r['error']:+7.1%} "
              f"{'yes' if r['host_bound'] else ''}")
    for name in ("all", "device_bound", "host_bound"):
        if name in table:
            t = table[name]
            print(f"{name}: {t['points']} points, median |error| {t['median_abs_error']:.1%}, "
                  f"max {t['max_abs_error']:.1%}")


def same_node_table(predict: Callable[[dict, int], float] | None = None) -> dict:
    """The published same-node series; with ``predict``, each point's prediction and error."""
    with open(DATA / "published_scaling.toml", "rb") as f:
        series = tomllib.load(f)["series"]
    rows = []
    for s in series:
        base = s["samples_per_s"][0]
        for g, sps in zip(s["gpus"], s["samples_per_s"]):
            row = {"model": s["model"], "device": s["device"], "precision": s["precision"],
                   "batch": s["batch"], "exchange": s["exchange"], "gpus": g,
                   "published_samples_per_s": sps, "speedup": sps / base,
                   "efficiency": sps / base / g}
            if predict is not None:
                row["predicted_samples_per_s"] = predict(s, g)
                row["error"] = row["predicted_samples_per_s"] / sps - 1.0
            rows.append(row)
    out = {"series": len(series), "rows": rows}
    errors = sorted(abs(r["error"]) for r in rows if "error" in r and r["gpus"] > 1)
    if errors:
        out["median_abs_error"] = errors[len(errors) // 2]
        out["max_abs_error"] = errors[-1]
    return out


def print_same_node(table: dict) -> None:
    print(f"\nsame node, published ({table['series']} series)")
    print(f"{'model':13} {'device':15} {'prec':5} {'batch':>5} {'exchange':22} {'GPUs':>4} "
          f"{'samples/s':>9} {'speedup':>7} {'eff':>5}" + ("  predicted  error"
                                                          if "median_abs_error" in table else ""))
    for r in table["rows"]:
        line = (f"{r['model']:13} {r['device']:15} {r['precision']:5} {r['batch']:5d} "
                f"{r['exchange']:22} {r['gpus']:4d} {r['published_samples_per_s']:9.0f} "
                f"{r['speedup']:7.2f} {r['efficiency']:5.0%}")
        if "error" in r:
            line += f"  {r['predicted_samples_per_s']:9.0f} {r['error']:+6.1%}"
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-out/published_fidelity.json")
    args = ap.parse_args()
    tables = {m: cross_device_table(m) for m in fidelity.MODES}
    for t in tables.values():
        print_cross_device(t)
    lomo = lomo_table()
    print_lomo(lomo)
    same = same_node_table(SAME_NODE_PREDICTOR)
    print_same_node(same)
    points = published.same_node(DATA / "published_scaling.toml")
    for name, keep in (("synthetic data", True), ("real data (input pipeline not modelled)",
                                                   False)):
        sel = [p for p in points if p.synthetic == keep]
        if sel:
            med, worst = published.error_summary(sel)
            over = sum(abs(p.error) > 0.15 for p in sel)
            print(f"same node, {name}: {len(sel)} points, median |error| {med:.1%}, "
                  f"max {worst:.1%}, {over} above 15%")
            same[f"summary_{'synthetic' if keep else 'real'}"] = {
                "points": len(sel), "median_abs_error": med, "max_abs_error": worst,
                "above_15pct": over}
    result = {"benchmark": "published_fidelity", "cross_device": tables,
              "leave_one_model_out": lomo, "same_node": same}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(result, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
