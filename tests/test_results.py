import json

import pytest

from scalelab.errors import UsageError
from scalelab.results import load_any, read_json, write_json


def test_round_trip_and_schema(tmp_path):
    p = write_json(tmp_path / "a" / "profile.json", "profile", {"x": 1.5, "nan": float("nan")})
    data = read_json(p, "profile")
    assert data == {"schema": "scalelab.profile/1", "x": 1.5, "nan": None}
    assert not [f for f in p.parent.iterdir() if f.name.endswith(".tmp")]


def test_rejects_other_kind_version_and_garbage(tmp_path):
    p = write_json(tmp_path / "plan.json", "plan", {})
    with pytest.raises(UsageError, match="expected a scalelab profile"):
        read_json(p, "profile")
    (tmp_path / "v2.json").write_text(json.dumps({"schema": "scalelab.profile/2"}))
    with pytest.raises(UsageError, match="not supported"):
        read_json(tmp_path / "v2.json", "profile")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_any(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(UsageError, match="not a scalelab result"):
        load_any(tmp_path / "other.json")
    with pytest.raises(UsageError, match="no such file"):
        load_any(tmp_path / "missing.json")


def test_unwritable_destination(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="cannot write"):
        write_json(tmp_path / "file" / "x.json", "run", {})


def test_written_files_have_the_ordinary_mode(tmp_path):
    """Results are readable by others as any file the user writes (0644 under umask 022),
    not the temporary file's 0600; another umask is honoured."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        p = write_json(tmp_path / "run.json", "run", {})
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
        os.umask(0o077)
        q = write_json(tmp_path / "private.json", "run", {})
        assert stat.S_IMODE(q.stat().st_mode) == 0o600
    finally:
        os.umask(old)
