"""Counted once, kept on disk: a model's operations, its description, the fit.

Counting a training step's operations (:func:`scalelab.opcount.step_ops`) builds the model
and runs a step on meta tensors; describing a model (:func:`scalelab.opcount.describe`)
builds it too; the cross-device fit (:func:`scalelab.hardware.fit.fit` and its
leave-one-out :func:`~scalelab.hardware.bands.bands`, kept here by
:func:`scalelab.hardware.packaged.fit_and_bands` where the package's own is stale) counts
the operations of every model in the reference table. Each takes seconds and gives the same
answer for the same inputs, so each is computed once and kept in the per-user cache
(:func:`scalelab.paths.cache_dir`):

    <cache>/ops/<key>.pkl        StepOps of (model, input shape, classes, optimizer, batch)
    <cache>/describe/<key>.pkl   WorkloadInfo of (model, input shape, classes, with FLOPs)
    <cache>/fit/<key>.pkl        (Fit, Bands) of the packaged reference data, where the
                                 package's own copy (hardware/fit.json) is stale
    <cache>/memory/<key>.pkl     memory components of (model, input shape, classes, optimizer)
    <cache>/sources/<kind>-<package>.json
                                 the digest of the source files below, with their times
                                 and sizes (:func:`source_digest`)

A key is the SHA-256 of everything the value depends on: the inputs above, the torch and
torchvision versions, :data:`FORMAT_VERSION` and the content of the source and data files
that compute it (so a change to the counting code, the record it returns or the reference
table is a new key, never a stale value). Values are pickled whole, whatever fields their
classes have; an entry that cannot be read back (truncated, corrupt, from other code) is
computed again and rewritten, never an error. Files are written atomically
(:func:`scalelab.results.write_text_atomic`); an unwritable cache only costs the count
next time. A model given as ``package.module:factory`` is the user's code, which can change
under the same name: it is kept in memory for the process, not on disk.

Nothing here imports torch: reading a cached value needs only the classes it holds.
Entries are pickles, read only from the user's own cache folder: a folder others can write
to is not a place to point ``SCALELAB_CACHE_DIR`` at.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from scalelab.paths import cache_dir

if TYPE_CHECKING:
    from scalelab.opcount import StepOps
    from scalelab.workload import WorkloadInfo, WorkloadSpec

FORMAT_VERSION = 1
"""Bump when what is stored for a kind changes shape without its source files changing."""

_PACKAGE = Path(__file__).resolve().parent
# what computes each kind of value: a module, with every scalelab module it imports
# (anywhere in it, transitively), and data files (globs relative to the package)
_SOURCES = {
    "ops": ("scalelab.opcount", ()),
    "describe": ("scalelab.opcount", ()),
    "fit": ("scalelab.hardware.bands", ("hardware/*.toml",)),  # imports the fit
    "memory": ("scalelab.profiler.memory", ()),
}

T = TypeVar("T")
_memory: dict[tuple[str, str], Any] = {}


@cache
def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"


def _module_file(name: str) -> Path | None:
    """The file of package module ``name`` (``scalelab.a.b``), or None if there is none."""
    parts = name.split(".")[1:]
    rel = Path(*parts)
    candidates = (_PACKAGE / rel.with_suffix(".py"),) if parts else ()
    for path in (*candidates, _PACKAGE / rel / "__init__.py"):
        if path.is_file():
            return path
    return None


# The imports of the package in a module's text: ``import scalelab.x [as y], ...`` and
# ``from scalelab.x import a [as b], ...`` (or a bracketed list over lines), each at the start
# of a line or after a ``;``, at any indentation (so inside a function too). Triple-quoted
# strings and comments are blanked first: an example in a docstring is no import. For the
# fit's 45 files, on a command's first run, this took 0.020 s where parsing each took 0.17 s.
_TRIPLE_QUOTED = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'')
_COMMENT = re.compile(r"#[^\n]*")
_IMPORT = re.compile(r"(?:^|;)[ \t]*(?:from[ \t]+(scalelab(?:\.\w+)*)[ \t]+import[ \t]+"
                     r"(\([^)]*\)|[^\n;]*)|import[ \t]+([^\n;]*))", re.M)


def _names(listed: str) -> list[str]:
    """The names of ``a as b, c``, or of such a list in brackets over lines."""
    return [part.split()[0] for part in listed.strip().strip("()").split(",") if part.split()]


@cache
def _imported(path: Path) -> frozenset[str]:
    """The ``scalelab`` modules a file imports, at module level or inside functions (and
    each ``module.name`` of a ``from module import name``: a submodule, or a name that is
    none)."""
    text = _COMMENT.sub("", _TRIPLE_QUOTED.sub("", path.read_text(encoding="utf-8")))
    names: set[str] = set()
    for m in _IMPORT.finditer(text):
        module, listed, plain = m.groups()
        if module:
            names.add(module)
            names.update(f"{module}.{name}" for name in _names(listed))
        else:
            names.update(n for n in _names(plain) if n.split(".")[0] == "scalelab")
    return frozenset(names)


def _closure(kind: str) -> tuple[list[Path], list[str]]:
    """The files of :func:`source_files` and the imported names that are no file of the
    package (a function or class imported from a module)."""
    root, data = _SOURCES[kind]
    seen: dict[str, Path] = {}
    absent: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen or name in absent:
            continue
        path = _module_file(name)
        if path is None:
            absent.add(name)
            continue
        seen[name] = path
        todo.extend(_imported(path) - set(seen))
    files = set(seen.values()) | {f for pattern in data for f in _PACKAGE.glob(pattern)}
    return sorted(files), sorted(absent)


def source_files(kind: str) -> list[Path]:
    """The files a value of ``kind`` is computed by: its module, the package modules it
    imports (transitively), and its data files."""
    return _closure(kind)[0]


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_mtime_ns, st.st_size]


def _stamps_path(kind: str) -> Path:
    package = hashlib.sha256(str(_PACKAGE).encode()).hexdigest()[:16]
    return cache_dir() / "sources" / f"{kind}-{package}.json"


def _stamped_digest(kind: str) -> str | None:
    """The digest kept for ``kind`` when nothing it was computed from has changed since:
    every file has the modification time and size it had, every imported name that was no
    file is still none, and the data files are the same."""
    try:
        record = json.loads(_stamps_path(kind).read_text())
        if record["package"] != str(_PACKAGE) or record["format"] != FORMAT_VERSION:
            return None
        for rel, stamp in record["files"].items():
            if _stamp(_PACKAGE / rel) != stamp:
                return None
        if any(_module_file(name) is not None for name in record["absent"]):
            return None
        data = {str(f.relative_to(_PACKAGE)) for pattern in _SOURCES[kind][1]
                for f in _PACKAGE.glob(pattern)}
        if not data <= record["files"].keys():
            return None
        return str(record["digest"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@cache
def source_digest(kind: str) -> str:
    """SHA-256 of the content of :func:`source_files`: a change to the code that computes a
    value, the record it returns or the data it reads is a new key.

    Finding the files (their import lines) and reading them took 0.03 s for the four kinds
    (0.18 s when each file was parsed); the digest is kept (``<cache>/sources/``) with each
    file's modification time and size, and used again while none has changed (the test
    Python makes of its own compiled files).
    """
    kept = _stamped_digest(kind)
    if kept is not None:
        return kept
    files, absent = _closure(kind)
    h = hashlib.sha256()
    stamps = {}
    for f in files:
        rel = str(f.relative_to(_PACKAGE))
        stamps[rel] = _stamp(f)
        h.update(rel.encode() + b"\0" + f.read_bytes())
    digest = h.hexdigest()
    _write(_stamps_path(kind), json.dumps({"package": str(_PACKAGE), "format": FORMAT_VERSION,
                                           "digest": digest, "files": stamps,
                                           "absent": absent}))
    return digest


def cache_key(kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Everything a value of ``kind`` computed from ``fields`` depends on."""
    return {"kind": kind, "format": FORMAT_VERSION, **fields,
            "torch": _version("torch"), "torchvision": _version("torchvision"),
            "source": source_digest(kind)}


def key_digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def entry_path(key: dict[str, Any]) -> Path:
    return cache_dir() / key["kind"] / f"{key_digest(key)[:40]}.pkl"


def _load(path: Path, key: dict[str, Any]) -> tuple[bool, Any]:
    try:
        record = pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - missing, corrupt or foreign: the entry is counted again
        return False, None
    if not isinstance(record, dict) or record.get("key") != key or "value" not in record:
        return False, None
    return True, record["value"]


def _write(path: Path, data: str | bytes) -> None:
    """Write ``data`` atomically, or nothing: an unwritable cache costs a recount."""
    from scalelab.errors import UsageError
    from scalelab.results import write_text_atomic

    try:
        write_text_atomic(path, data)
    except (OSError, UsageError):
        pass


def _store(path: Path, key: dict[str, Any], value: Any) -> None:
    try:
        data = pickle.dumps({"key": key, "value": value}, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return  # a value that cannot be pickled is counted again next time
    _write(path, data)


def cached(kind: str, fields: dict[str, Any], compute: Callable[[], T],
           persist: bool = True) -> T:
    """``compute()``, or what it returned before for the same key (in this process, else on
    disk when ``persist``)."""
    key = cache_key(kind, fields)
    mem = (kind, key_digest(key))
    if mem in _memory:
        return _memory[mem]
    path = entry_path(key)
    found, value = _load(path, key) if persist else (False, None)
    if not found:
        value = compute()
        if persist:
            _store(path, key, value)
    _memory[mem] = value
    return value


def clear_memory() -> None:
    """Forget the values kept in this process (the disk cache stays)."""
    _memory.clear()


def _spec(spec: WorkloadSpec | str) -> WorkloadSpec:
    from scalelab.workload import WorkloadSpec

    return WorkloadSpec(model=spec) if isinstance(spec, str) else spec


def _lm_fields(spec: WorkloadSpec) -> dict:
    """What else names a model that takes token ids: its input and, for a built-in language
    model, its whole shape (a reduced copy, an ``hf:`` file's contents); nothing for an
    image model, so that its keys stay those written before."""
    if not spec.tokens:
        return {}
    lm = spec.transformer
    return {"input": "tokens", "transformer": lm.to_dict() if lm is not None else None}


def step_ops(spec: WorkloadSpec | str, batch_size: int) -> StepOps:
    """:func:`scalelab.opcount.step_ops`, counted once per (model, input shape, classes,
    optimizer, batch, torch version) and kept on disk."""
    spec = _spec(spec)

    def count():
        from scalelab import opcount

        return opcount.step_ops(spec, batch_size)

    fields = {"model": spec.model, "input_shape": list(spec.input_shape), **_lm_fields(spec),
              "num_classes": spec.num_classes, "optimizer": spec.optimizer,
              "batch_size": batch_size}
    return cached("ops", fields, count, persist=spec.named)


def describe(spec: WorkloadSpec | str, flops: bool = True) -> WorkloadInfo:
    """:func:`scalelab.opcount.describe`, computed once per (model, input shape, classes,
    FLOPs or not, torch version) and kept on disk."""
    spec = _spec(spec)

    def run():
        from scalelab import opcount

        return opcount.describe(spec, flops=flops)

    fields = {"model": spec.model, "input_shape": list(spec.input_shape), **_lm_fields(spec),
              "num_classes": spec.num_classes, "flops": bool(flops)}
    return cached("describe", fields, run, persist=spec.named)


def memory_components(spec: WorkloadSpec | str) -> dict | None:
    """:func:`scalelab.profiler.memory.try_memory_components` (parameters, gradients,
    optimizer state, activations per sample, counted on meta tensors), once per (model,
    input shape, classes, optimizer, torch version) and kept on disk."""
    spec = _spec(spec)

    def run():
        from scalelab.profiler import memory

        return memory.try_memory_components(spec)

    fields = {"model": spec.model, "input_shape": list(spec.input_shape), **_lm_fields(spec),
              "num_classes": spec.num_classes, "optimizer": spec.optimizer}
    return cached("memory", fields, run, persist=spec.named)
