"""The reference table's fit as shipped (hardware/fit.json): current, exact, and ignored when
stale."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from scalelab import opcache
from scalelab.hardware import packaged
from scalelab.hardware.bands import bands
from scalelab.hardware.fit import fit

WRITE = "write it again: make fit (python -m scalelab.hardware.packaged --write)"


def test_the_packaged_fit_was_written_by_this_code_and_table():
    d = packaged.read()
    assert d is not None, f"{packaged.PATH} is missing; {WRITE}"
    assert d["source"] == opcache.source_digest("fit"), \
        f"{packaged.PATH} is stale (the fit's code or reference table changed); {WRITE}"
    assert packaged.current() is not None


@pytest.mark.slow  # counts every reference model (unless another test did) and fits them
def test_the_packaged_fit_is_the_fit_of_the_table():
    """The file read back is, field by field, the fit and bands computed now (the same
    torch as wrote it: exactly; another: within 2% on every fraction)."""
    shipped = packaged.current()
    assert shipped is not None, WRITE
    f, b = fit(), bands()
    pf, pb = shipped
    if packaged.read()["torch"] == metadata.version("torch"):
        assert (pf, pb) == (f, b)
    else:
        assert pf.devices.keys() == f.devices.keys() and pf.factors == f.factors
        for k, v in f.devices.items():
            assert pf.devices[k].e_c == pytest.approx(v.e_c, rel=0.02)
            assert pf.devices[k].e_m == pytest.approx(v.e_m, rel=0.02)
    # and what the file holds is what to_dict writes of them
    assert packaged.to_dict(pf, pb) == {k: packaged.read()[k] for k in ("fit", "bands")}
    assert packaged.from_dict(json.loads(json.dumps(packaged.to_dict(f, b)))) == (f, b)


def test_a_stale_missing_or_foreign_file_is_not_used(tmp_path, monkeypatch):
    good = packaged.read()
    assert good is not None
    monkeypatch.setattr(packaged, "_digest", lambda: "the code changed")
    packaged.current_file.cache_clear()
    packaged.current.cache_clear()
    try:
        assert packaged.current_file() is None and packaged.current() is None
    finally:
        monkeypatch.undo()
        packaged.current_file.cache_clear()
        packaged.current.cache_clear()
    assert packaged.current() is not None and packaged.current_file() == good
    assert packaged.read(tmp_path / "none.json") is None
    (tmp_path / "torn.json").write_text(json.dumps(good)[:200])
    assert packaged.read(tmp_path / "torn.json") is None
    (tmp_path / "other.json").write_text(json.dumps({**good, "format": packaged.FORMAT + 1}))
    assert packaged.read(tmp_path / "other.json") is None


def test_the_check_says_current_or_stale(capsys, monkeypatch):
    assert packaged.main([]) == 0
    assert "current" in capsys.readouterr().out
    monkeypatch.setattr(packaged, "_digest", lambda: "the code changed")
    assert packaged.main([]) == 1
    out = capsys.readouterr().out
    assert "stale" in out and "--write" in out
