"""What a plan and a validation read from ``calibration.json``: :class:`CalibrationInput`.

The file ``scalelab calibrate`` writes (``scalelab.calibration/1``): the model parameters it
decided on, which model the held-out errors chose and why, its band and the cases it was
fitted on. Read by ``plan --calibration`` and ``validate --calibration``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalelab.errors import UsageError
from scalelab.plan.step import ModelParams
from scalelab.results import read_json
from scalelab.theory.band import ErrorBand


def load_calibration(path: str | Path) -> ModelParams:
    """``params`` of a ``scalelab.calibration/1`` file as :class:`ModelParams`."""
    return load_calibration_file(path).params


CALIBRATED, UNCALIBRATED = "calibrated", "uncalibrated"


@dataclass(frozen=True)
class CalibrationInput:
    """What a plan and a validation take from ``calibration.json``: the model to use, why,
    its band, and what it was fitted on."""

    params: ModelParams
    """The parameters the calibration decided on (fitted, or the prior when rejected)."""
    model: str
    """'calibrated' or 'uncalibrated': which model the held-out errors chose."""
    reason: str
    """Why."""
    band: ErrorBand | None
    """measured/predicted range on held-out cases (None in older files)."""
    fitted_cases: tuple[dict, ...] = ()
    """The configs of the cases fitted on (grid keys)."""
    prior: ModelParams = ModelParams()  # noqa: RUF009 - frozen
    """The parameters before the fit."""

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "calibration") -> CalibrationInput:
        """A calibration file's content (older files too), each field checked: one line
        naming ``where`` and the field for a value of the wrong kind."""
        if not isinstance(d.get("params"), dict):
            raise UsageError(f"{where}: calibration file has no 'params' object")
        try:
            band = ErrorBand.from_dict(d["band"]) if d.get("band") else None
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"{where}: the calibration's band is invalid ({e})") from None
        decision, prior = d.get("decision") or {}, d.get("prior") or {}
        for name, v in (("decision", decision), ("prior", prior)):
            if not isinstance(v, dict):
                raise UsageError(f"{where}: the calibration's {name} is not an object")
        model = d.get("model") or decision.get("model") or CALIBRATED
        if model not in (CALIBRATED, UNCALIBRATED):
            raise UsageError(f"{where}: model must be {CALIBRATED} or {UNCALIBRATED}, "
                             f"got {model!r}")
        cases = d.get("fitted_cases") or ()
        if not isinstance(cases, list | tuple):
            raise UsageError(f"{where}: the calibration's fitted_cases is not a list")
        return cls(ModelParams.from_dict(d["params"], f"{where}: params"), model,
                   str(decision.get("reason") or ""), band, tuple(cases),
                   ModelParams.from_dict(prior, f"{where}: prior"))


def load_calibration_file(path: str | Path) -> CalibrationInput:
    """A ``scalelab.calibration/1`` file: params, the decision and the band (read as
    ``validate --calibration`` reads it)."""
    return CalibrationInput.from_dict(read_json(path, "calibration"), str(path))
