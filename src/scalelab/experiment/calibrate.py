"""Calibration that earns its place (``scalelab calibrate``): fit, hold out, decide, band.

1. **Fit** what the cases constrain, each parameter with a prior at its uncalibrated value
   (:func:`scalelab.experiment.fit.fit`; which parameters and why, with uncertainties).
2. **Choose by held-out error** (:func:`cross_validate`): k-fold over the cases (k = n up to
   5, so leave-one-out below that; case i in fold i mod k), each fold selected and fitted
   again without its cases. The calibrated model replaces the uncalibrated one only when its
   held-out median |error| is lower and its max |error| no higher, and only with at least
   :data:`MIN_CASES` cases; ``calibration.json`` records both errors and the decision, and
   its ``params`` are the model chosen (what ``plan --calibration`` and ``validate
   --calibration`` use).
3. **Band** (:class:`scalelab.theory.band.ErrorBand`): from the chosen model's held-out
   errors (calibrated), or the uncalibrated model's errors on every case.

Python use::

    from scalelab.experiment.calibrate import calibrate
    from scalelab.experiment.observations import load_observations
    cal = calibrate(load_observations(["validation.json"]))
    cal.model, cal.params, cal.band.time_s(0.25)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scalelab.errors import UsageError
from scalelab.experiment.case import ErrorSummary, summarize_errors
from scalelab.experiment.fit import (  # noqa: F401 - the calibration's public names
    BOUNDS,
    OBJECTIVE,
    PARAMS,
    Fit,
    ParameterFit,
    fit,
    log_errors,
    select,
    summary,
)
from scalelab.experiment.observations import (  # noqa: F401 - re-exported
    Observation,
    load_observations,
    observation_from_run,
    observations_from_validation,
)
from scalelab.plan.calibration_input import CALIBRATED, UNCALIBRATED, CalibrationInput
from scalelab.plan.step import ModelParams
from scalelab.theory.band import ErrorBand, band_from_log_errors

MIN_CASES = 3
MAX_FOLDS = 5


@dataclass(frozen=True)
class CrossValidation:
    """Held-out errors of the uncalibrated and the calibrated model over k folds."""

    folds: int
    uncalibrated: ErrorSummary
    calibrated: ErrorSummary
    calibrated_log_errors: tuple[float, ...]
    """log(predicted/measured) of every case when held out, calibrated model."""

    @property
    def calibration_helps(self) -> bool:
        u, c = self.uncalibrated, self.calibrated
        return (c.median_abs_error < u.median_abs_error
                and c.max_abs_error <= u.max_abs_error)

    def to_dict(self) -> dict[str, Any]:
        return {"folds": self.folds, "uncalibrated": self.uncalibrated.to_dict(),
                "calibrated": self.calibrated.to_dict()}


def cross_validate(observations: list[Observation], free: tuple[str, ...] | None = None,
                   prior: ModelParams | None = None, folds: int | None = None
                   ) -> CrossValidation:
    """k-fold held-out errors (case i in fold i mod k); leave-one-out when k = n."""
    prior = prior or ModelParams()
    n = len(observations)
    k = min(folds or MAX_FOLDS, n)
    if k < 2:
        raise UsageError(f"cross-validation needs at least 2 cases, got {n}")
    cal = [0.0] * n
    for j in range(k):
        train = [o for i, o in enumerate(observations) if i % k != j]
        params = fit(train, free, prior).params
        for i in range(j, n, k):
            cal[i] = log_errors([observations[i]], params)[0]
    unc = log_errors(observations, prior)
    return CrossValidation(k, summarize_errors([math.exp(e) - 1 for e in unc]),
                           summarize_errors([math.exp(e) - 1 for e in cal]), tuple(cal))



@dataclass(frozen=True)
class Calibration:
    """calibration.json: the model chosen, why, the fit, the held-out errors and the band."""

    params: ModelParams
    """The model to predict with: the fitted parameters, or the prior when rejected."""
    model: str
    """'calibrated' or 'uncalibrated': which model ``params`` are."""
    reason: str
    """Why that model was chosen."""
    fitted_cases: tuple[dict, ...]
    """The configs of the cases fitted on (grid keys)."""
    band: ErrorBand | None = None
    """Measured/predicted range of the chosen model (None in files without one)."""
    prior: ModelParams = ModelParams()  # noqa: RUF009 - frozen
    fit: Fit | None = None
    cross_validation: CrossValidation | None = None
    sources: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"params": self.params.to_dict(), "model": self.model,
                             "decision": {"model": self.model, "reason": self.reason}}
        if self.cross_validation is not None:
            d["decision"]["cross_validation"] = self.cross_validation.to_dict()
        if self.fit is not None:
            f = self.fit
            d.update({"fitted_params": f.params.to_dict(), "free": list(f.free),
                      "parameters": {p.name: p.to_dict() for p in f.parameters},
                      "bounds": {k: list(BOUNDS[k]) for k in f.free},
                      "before": f.before, "after": f.after, "per_case": list(f.per_case),
                      "objective": OBJECTIVE,
                      "underdetermined": len(self.fitted_cases) <= len(f.free)})
        d.update({"prior": self.prior.to_dict(), "band": self.band.to_dict() if self.band
                  else None, "fitted_cases": list(self.fitted_cases),
                  "sources": list(self.sources)})
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "calibration") -> Calibration:
        """What ``validate`` and ``plan`` need from a calibration file (older ones too), read
        as a plan reads it (:meth:`scalelab.plan.calibration_input.CalibrationInput.from_dict`)."""
        c = CalibrationInput.from_dict(d, where)
        return cls(c.params, c.model, c.reason, c.fitted_cases, c.band, c.prior)


def _decide(n: int, result: Fit, cv: CrossValidation | None) -> tuple[str, str]:
    if n < MIN_CASES:
        return UNCALIBRATED, (f"{n} case(s): at least {MIN_CASES} are needed to fit on some "
                              "and judge on the others")
    if not result.free:
        return UNCALIBRATED, "the cases constrain no parameter"
    u, c = cv.uncalibrated, cv.calibrated
    errors = (f"held-out |error| calibrated median {c.median_abs_error:.1%}, max "
              f"{c.max_abs_error:.1%}; uncalibrated median {u.median_abs_error:.1%}, max "
              f"{u.max_abs_error:.1%} ({cv.folds}-fold)")
    if cv.calibration_helps:
        return CALIBRATED, errors
    return UNCALIBRATED, "the calibration does not lower the held-out error: " + errors


def calibrate(observations: list[Observation], free: tuple[str, ...] | None = None,
              prior: ModelParams | None = None, sources: tuple[str, ...] = ()) -> Calibration:
    """Fit, cross-validate, decide which model to use, and its band."""
    if not observations:
        raise UsageError("nothing to fit: no measured cases")
    prior = prior or ModelParams()
    n = len(observations)
    result = fit(observations, free, prior)
    cv = cross_validate(observations, free, prior) if n >= MIN_CASES else None
    model, reason = _decide(n, result, cv)
    if model == CALIBRATED:
        params = result.params
        band = band_from_log_errors(list(cv.calibrated_log_errors),
                                    f"held-out errors of the calibrated model ({cv.folds}-fold)")
    else:
        params = prior
        band = band_from_log_errors(log_errors(observations, prior),
                                    "errors of the uncalibrated model on the measured cases")
    return Calibration(params, model, reason, tuple(o.config for o in observations), band,
                       prior, result, cv, tuple(sources))


def document(cal: Calibration) -> dict[str, Any]:
    """The content of calibration.json."""
    return cal.to_dict()


def band_of(calibration: dict[str, Any] | Calibration | None) -> ErrorBand | None:
    """The band of a loaded calibration file (None when it has none)."""
    if calibration is None:
        return None
    if isinstance(calibration, dict):
        calibration = Calibration.from_dict(calibration)
    return calibration.band


__all__ = ["BOUNDS", "CALIBRATED", "PARAMS", "UNCALIBRATED", "Calibration", "CrossValidation",
           "Fit", "Observation", "band_of", "calibrate", "cross_validate", "document", "fit",
           "load_observations", "log_errors", "observation_from_run",
           "observations_from_validation", "select", "summary"]
