"""Schema-versioned JSON files, written atomically.

Every result file carries ``"schema": "scalelab.<kind>/<major>"``. Writers go through
:func:`write_json` (temporary file in the same folder, fsync, rename), so a reader never sees
half a file. Readers go through :func:`read_json`, which rejects another kind or major version
with a :class:`~scalelab.errors.UsageError`.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from scalelab.errors import UsageError

MAJOR = {
    "profile": 1,
    "plan": 1,
    "run": 1,
    "validation": 1,
    "calibration": 1,
    "compare": 1,
}


def schema_name(kind: str) -> str:
    return f"scalelab.{kind}/{MAJOR[kind]}"


def _clean(obj: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _umask() -> int:
    """The process's file-creation mask (reading it means setting it; set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str | bytes) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    The file gets the mode an ordinary ``open(path, "w")`` would give it (0666 less the
    umask, 0644 under the usual umask), not the 0600 of the temporary file.
    """
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder; give a file's name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    mode = "wb" if isinstance(text, bytes) else "w"
    try:
        with os.fdopen(fd, mode) as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_json(path: str | os.PathLike, kind: str, data: dict[str, Any]) -> Path:
    """Write ``data`` as a ``scalelab.<kind>`` file atomically; returns the path."""
    body = {"schema": schema_name(kind), **{k: v for k, v in data.items() if k != "schema"}}
    return write_text_atomic(path, json.dumps(_clean(body), indent=2, allow_nan=False) + "\n")


def load_any(path: str | os.PathLike) -> tuple[str, dict[str, Any]]:
    """Read a scalelab JSON file of any known kind; returns ``(kind, data)``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise UsageError(_not_utf8(path, e)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if not isinstance(schema, str) or not schema.startswith("scalelab."):
        raise UsageError(f"{path}: not a scalelab result (no 'schema': 'scalelab.<kind>/<n>')")
    kind, _, major = schema[len("scalelab."):].partition("/")
    if kind not in MAJOR:
        raise UsageError(f"{path}: unknown scalelab schema {schema!r}")
    if major != str(MAJOR[kind]):
        raise UsageError(
            f"{path}: schema {schema!r} is not supported (this scalelab reads {schema_name(kind)})"
        )
    return kind, data


def read_json(path: str | os.PathLike, kind: str) -> dict[str, Any]:
    """Read a ``scalelab.<kind>`` file; another kind or version is a UsageError."""
    found, data = load_any(path)
    if found != kind:
        raise UsageError(f"{path}: expected a scalelab {kind} file, found {data['schema']!r}")
    return data


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a TOML input file (cluster, workload, baseline); problems are UsageErrors."""
    import tomllib

    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML ({e})") from None
    except UnicodeDecodeError as e:
        raise UsageError(_not_utf8(path, e)) from None


def _not_utf8(path: str | os.PathLike, e: UnicodeDecodeError) -> str:
    return f"{path}: not UTF-8 text (byte {e.start}: {e.reason})"
