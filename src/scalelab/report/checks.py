"""What a report refuses before drawing anything: files it would render without a word.

Each refusal is one line naming the file, what is wrong and what to do: a kind the report
has no page for (a calibration), a plan or profile cut to its schema, batches that are not
a list, a measured step that is not a positive time.
"""

from __future__ import annotations

import math
from typing import Any

from scalelab.errors import UsageError

#: fields a file of each kind must hold to be reported, and how they are written again
_NEEDS = {
    "plan": (("sweep", list), ("recommendation", dict), "scalelab plan ... --out plan.json"),
    "profile": (("workload", dict), ("batches", list), "scalelab profile MODEL --out "
                                                        "profile.json"),
}


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        and v > 0


def check_file(path: str, kind: str, data: dict) -> None:
    """Refuse, in one line, a result file the report cannot show as it is."""
    if kind == "calibration":
        raise UsageError(f"{path}: a calibration file has no page in the report: give it to "
                         "scalelab plan --calibration FILE, and report the plan it makes")
    if kind in _NEEDS:
        *fields, again = _NEEDS[kind]
        # a language model's plan is one layout, searched: it has no sweep over devices
        lm = kind == "plan" and data.get("kind") == "language-model"
        for key, typ in fields:
            v = data.get(key)
            if lm and key == "sweep" and isinstance(v, list):
                continue
            if not isinstance(v, typ) or not v:
                what = "a list" if typ is list else "an object"
                why = (f"not a complete {kind}: '{key}' must be {what} (missing)" if v is None
                       else f"not a complete {kind}: '{key}' is empty" if isinstance(v, typ)
                       else f"cannot be reported: a field of the wrong kind: '{key}' must "
                            f"be {what} (got {type(v).__name__} {v!r:.40})")
                raise UsageError(f"{path}: {why}; write it again with {again}")
    if kind == "profile":
        for row in data["batches"]:
            if not isinstance(row, dict) or not _positive(row.get("step_s")):
                step = row.get("step_s") if isinstance(row, dict) else row
                raise UsageError(f"{path}: a measured batch's step_s must be a positive time "
                                 f"in seconds, got {step!r}; profile again")
    if kind == "validation":
        for case in data.get("cases") or []:
            v = case.get("measured_step_s") if isinstance(case, dict) else None
            if v is not None and not _positive(v):
                raise UsageError(f"{path}: a case's measured_step_s must be a positive time "
                                 f"in seconds, got {v!r}; validate again")
    if kind == "run":
        steps = data.get("steps")
        v = steps.get("step_s") if isinstance(steps, dict) else None
        v = v.get("median") if isinstance(v, dict) else v
        if v is not None and not _positive(v):
            raise UsageError(f"{path}: the run's measured step_s must be a positive time in "
                             f"seconds, got {v!r}; run it again")
