"""The packaged language-model fit is the fit of the data it records, and predicts it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalelab.hardware import lm_fit as packaged
from scalelab.plan.lm import fit

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "lm"
needs_data = pytest.mark.skipif(not (DATA / fit.FILES["pytorch"]).is_file(),
                                reason="the fitting data (../shared/data/lm) is not here")


@needs_data
def test_packaged_fit_equals_a_refit_of_the_recorded_data():
    assert packaged.digest() == fit.data_digest(DATA)
    for stack, rows in fit.cases(DATA).items():
        refit = fit.fit(stack, rows).to_dict()
        have = packaged.stack_fit(stack).efficiency.to_dict()
        assert have == pytest.approx(refit, rel=1e-9, abs=1e-12)


@needs_data
def test_packaged_fit_predicts_its_rows_within_its_band():
    for stack, rows in fit.cases(DATA).items():
        f = packaged.stack_fit(stack)
        lo, hi = f.band
        errs = [c.measured_s / fit.predict(c, f.efficiency) - 1.0 for c in rows]
        # in-sample errors lie within the held-out band (the closed-form leave-one-out
        # holds each row's host/device side, so a row may sit a little outside it)
        assert lo - 0.02 <= min(errs) and max(errs) <= hi + 0.02
        med = sorted(abs(e) for e in errs)[len(errs) // 2]
        assert med < 0.08


@needs_data
def test_leave_one_row_out_closed_form_equals_refitting():
    rows = fit.cases(DATA)["megatron"][:60]
    closed = dict((c.label, e) for c, e in fit.held_out("megatron", rows))
    for i in (0, 17, 42):
        eff = fit.fit("megatron", rows[:i] + rows[i + 1:])
        e = fit.predict(rows[i], eff) / rows[i].measured_s - 1.0
        assert closed[rows[i].label] == pytest.approx(e, abs=0.02)


def test_missing_data_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="lacks"):
        fit.cases(tmp_path)
