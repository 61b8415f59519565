"""The language-model step model against the published runs it is fitted on, held out.

For each set of ``../shared/data/lm`` (llm-foundry's MPT runs on A100: leave one *model*
out, every row of it predicted by a fit on the other models; vTrain's single-node A100
runs: leave one *row* out), the median and worst relative error of the predicted step,
the fitted factors (on every row), and the worst rows. The fit is
:mod:`scalelab.plan.lm.fit`, the same code that writes the packaged ``lm_fit.json``.

    python benchmarks/lm_fidelity.py [--data ../shared/data/lm] [--out bench-out/lm_fidelity.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scalelab.plan.lm import fit as lm_fit

GOAL = {"median": 0.08, "worst": 0.20}


def run(data: Path) -> dict:
    out = {"data_digest": lm_fit.data_digest(data), "sets": {}}
    for stack, rows in lm_fit.cases(data).items():
        ho = lm_fit.held_out(stack, rows)
        s = lm_fit.summary([e for _, e in ho])
        worst = sorted(ho, key=lambda x: -abs(x[1]))[:5]
        out["sets"][lm_fit.FILES[stack]] = {
            "stack": stack, "held_out": "model" if stack == "pytorch" else "row", **s,
            "efficiency": lm_fit.fit(stack, rows).to_dict(),
            "worst_rows": [{"row": c.label, "error": e} for c, e in worst],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=lm_fit.DATA)
    ap.add_argument("--out", type=Path, default=Path("bench-out/lm_fidelity.json"))
    args = ap.parse_args(argv)
    try:
        res = run(args.data)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, d in res["sets"].items():
        ok = d["median"] <= GOAL["median"] and d["worst"] <= GOAL["worst"]
        print(f"{name}: leave-one-{d['held_out']}-out over {d['rows']} rows: median "
              f"{d['median']:.1%}, worst {d['worst']:.1%} (goal <= {GOAL['median']:.0%} / "
              f"{GOAL['worst']:.0%}: {'met' if ok else 'not met'})")
        for w in d["worst_rows"][:3]:
            print(f"    {w['error']:+.1%}  {w['row']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
