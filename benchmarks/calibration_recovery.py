"""Calibration recovers a wrongly described cluster: fit on 2 workers, predict 4.

The cluster is described wrongly on purpose, as a user's description often is: every link is
stated twice as fast as the emulated one (the NIC says 2x what it delivers) and the
exchange is stated to hide fully behind compute (overlap 1). Parameter-server runs of an
AlexNet-like model (7.0 MB of gradients, communication-bound) on emulated networks
(network namespaces, links shaped with tc tbf) are measured:

- 2 workers, 1 and 2 servers, at two rates: the cases the calibration is fitted on
  (:func:`scalelab.experiment.calibrate.calibrate`, priors at the wrong description);
- 4 workers, 1, 2 and 4 servers: the cases it predicts.

Each case's measured compute and contention are as :mod:`scalelab.experiment.validate`
measures them; only the link and the overlap come from the description. Printed: the
4-worker cases' |error| with the wrong description and with the calibration, the fitted
parameters with their uncertainty, the decision, the band and the load average. Goal:
calibrated median |error| <= 10% where the wrong description is off by more than 30%.

    sudo python benchmarks/calibration_recovery.py --out bench-out/calibration_recovery.json
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.chdir(ROOT)  # the ranks import tests.toy_validate from here
sys.path.insert(0, str(ROOT))

from scalelab import netem  # noqa: E402
from scalelab.experiment.calibrate import calibrate  # noqa: E402
from scalelab.experiment.case import CaseInputs, predict_case, relative_error  # noqa: E402
from scalelab.experiment.observations import Observation  # noqa: E402
from scalelab.experiment.validate import (  # noqa: E402
    ValidationOptions,
    describe_config,
    run_cases,
)
from scalelab.plan.step import ModelParams  # noqa: E402
from scalelab.results import read_json, write_json  # noqa: E402
from scalelab.theory.units import bps_to_Bps  # noqa: E402
from scalelab.workload import WorkloadSpec  # noqa: E402

SPEC = WorkloadSpec("tests.toy_validate:alexnet_like", input_shape=(3, 32, 32), num_classes=10)
LINK_OVERSTATED = 2.0  # the description's link over the emulated one
DESCRIBED = ModelParams(overlap=1.0)  # the description: the exchange hides behind compute


def ps(w, p, rate, b=8):
    return {"architecture": "ps", "workers": w, "ps": p, "partition": "balanced",
            "batch_size": b, "rate": rate}


FIT = [ps(2, 1, "200mbit"), ps(2, 2, "200mbit"), ps(2, 1, "300mbit"), ps(2, 2, "300mbit")]
PREDICT = [ps(4, 1, "200mbit"), ps(4, 2, "200mbit"), ps(4, 4, "200mbit"), ps(4, 2, "300mbit")]


def described(case: dict) -> CaseInputs:
    """The case's inputs as the wrong description states them: 2x link, no latency."""
    inputs = CaseInputs.from_dict(case["inputs"])
    stated = LINK_OVERSTATED * bps_to_Bps(netem.parse_rate(case["config"]["rate"]))
    return dataclasses.replace(inputs, bandwidth_Bps=stated, latency_s=0.0)


def errors(cases: list[dict], params: ModelParams) -> list[float]:
    return [relative_error(predict_case(described(c), params).step_s, c["measured_step_s"])
            for c in cases]


def _show(case) -> None:
    print(f"  {describe_config(case.config):28s} measured {case.measured_step_s * 1e3:7.1f} ms "
          f"(model on the measured link {case.predicted_step_s * 1e3:7.1f} ms, "
          f"{case.error:+.1%})", flush=True)


def _print(result: dict) -> None:
    cal = result["calibration"]
    for name, p in cal["parameters"].items():
        if p["fitted"]:
            print(f"fitted {name}: {p['value']:.4g} ± {p['std']:.2g} (prior {p['prior']:g})")
    print(f"decision: {cal['model']} ({cal['decision']['reason']})")
    band = cal["band"]
    print(f"band: measured within x{band['low']:.3f} .. x{band['high']:.3f} of predicted; "
          f"{result['inside_band']} of {len(result['predict'])} 4-worker cases inside")
    for c, u, k in zip(result["predict"], result["uncalibrated_errors"],
                       result["calibrated_errors"]):
        print(f"  {describe_config(c['config']):28s} wrong description {u:+7.1%}  "
              f"calibrated {k:+7.1%}")
    un, ca = result["uncalibrated"], result["calibrated"]
    print(f"4-worker |error|, wrong description: median {un['median']:.1%}, max {un['max']:.1%}"
          "  (goal > 30%)")
    print(f"4-worker |error|, calibrated:        median {ca['median']:.1%}, max {ca['max']:.1%}"
          "  (goal <= 10%)")
    print(f"{result['wall_s']:.0f} s; load average (1 min) {result['load_average'][0]:.1f} -> "
          f"{result['load_average'][1]:.1f} on {os.cpu_count()} cores")


def _measure(steps: int) -> tuple[list[dict], list[dict]]:
    options = ValidationOptions(steps=steps, warmup_steps=2, profile_steps=3, timeout_s=120)
    say = lambda m: print(f"  . {m}", flush=True)  # noqa: E731
    print(f"fitting cases ({len(FIT)}), then the 4-worker cases ({len(PREDICT)})", flush=True)
    fit_cases = run_cases(SPEC, FIT, options, say=say, on_case=_show).to_dict()["cases"]
    test_cases = run_cases(SPEC, PREDICT, options, say=say, on_case=_show).to_dict()["cases"]
    return fit_cases, test_cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default="bench-out/calibration_recovery.json")
    ap.add_argument("--measured", metavar="FILE", default=None,
                    help="analyse the runs of an earlier output instead of running again")
    args = ap.parse_args()
    t0, load_before = time.perf_counter(), os.getloadavg()[0]
    if args.measured:
        earlier = read_json(args.measured, "validation")
        fit_cases, test_cases = earlier["fit"], earlier["predict"]
        print(f"the runs of {args.measured} (measured at load "
              f"{earlier['load_average'][0]:.1f} -> {earlier['load_average'][1]:.1f})")
    else:
        fit_cases, test_cases = _measure(args.steps)
    cal = calibrate([Observation(c["config"], described(c), c["measured_step_s"])
                     for c in fit_cases], prior=DESCRIBED)
    unc, cald = errors(test_cases, DESCRIBED), errors(test_cases, cal.params)
    inside = 0
    for c in test_cases:
        lo, hi = cal.band.time_s(predict_case(described(c), cal.params).step_s)
        inside += lo <= c["measured_step_s"] <= hi
    result = {
        "fit": fit_cases, "predict": test_cases, "calibration": cal.to_dict(),
        "link_overstated": LINK_OVERSTATED, "described": DESCRIBED.to_dict(),
        "uncalibrated_errors": unc, "calibrated_errors": cald, "inside_band": inside,
        "uncalibrated": {"median": statistics.median(map(abs, unc)), "max": max(map(abs, unc))},
        "calibrated": {"median": statistics.median(map(abs, cald)), "max": max(map(abs, cald))},
        "wall_s": time.perf_counter() - t0,
        "load_average": [load_before, os.getloadavg()[0]],
    }
    result["meets_goal"] = (result["calibrated"]["median"] <= 0.10
                            and result["uncalibrated"]["median"] > 0.30)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, "validation", result)
    _print(result)
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
