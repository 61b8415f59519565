"""Re-exports of :mod:`scalelab.experiment.validate` and its parts (kept for one release)."""

from __future__ import annotations

import sys

from scalelab.experiment.case import (  # noqa: F401
    CaseInputs,
    error_summary,
    predict_case,
    relative_error,
)
from scalelab.experiment.measure import (  # noqa: F401
    Measurements,
    case_inputs,
    measured_parts,
    time_concurrently,
    worker_threads,
)
from scalelab.experiment.validate import (  # noqa: F401
    GRID_KEYS,
    SCHEMA_KIND,
    Validation,
    ValidationCase,
    ValidationOptions,
    config_key,
    describe_config,
    expand,
    parse_grid,
    run_cases,
    run_validation,
    summarize,
)

predict = predict_case

if __name__ == "__main__":
    from scalelab.experiment.measure import child_main

    raise SystemExit(child_main(sys.argv[1:]))
