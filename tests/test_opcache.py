"""The on-disk cache of counted operations, model descriptions and the fit."""

from __future__ import annotations

import ast
import os
import pickle
from pathlib import Path

import pytest

from scalelab import opcache, opcount, paths
from scalelab.hardware import bands as bandsmod
from scalelab.hardware import fit as fitmod
from scalelab.hardware import packaged
from scalelab.workload import WorkloadSpec


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """An empty cache folder, nothing remembered in the process."""
    monkeypatch.delenv("SCALELAB_CACHE", raising=False)
    monkeypatch.setenv("SCALELAB_CACHE_DIR", str(tmp_path / "cache"))
    opcache.clear_memory()
    yield tmp_path / "cache"
    opcache.clear_memory()


@pytest.fixture()
def counted(monkeypatch):
    """opcount.step_ops replaced by a counter returning a value that names its inputs."""
    calls = []

    def fake(spec, batch_size):
        calls.append((spec.model, batch_size))
        return {"model": spec.model, "shape": spec.input_shape, "batch": batch_size,
                "call": len(calls)}

    monkeypatch.setattr(opcount, "step_ops", fake)
    return calls


def test_hit_avoids_recounting(cache, counted):
    spec = WorkloadSpec("resnet50")
    first = opcache.step_ops(spec, 64)
    assert counted == [("resnet50", 64)]
    opcache.clear_memory()  # a new process: only the disk remembers
    again = opcache.step_ops(spec, 64)
    assert counted == [("resnet50", 64)]
    assert again == first
    assert len(list((cache / "ops").glob("*.pkl"))) == 1
    opcache.step_ops(spec, 32)  # another batch is another count
    assert counted == [("resnet50", 64), ("resnet50", 32)]


def test_key_changes_with_each_field(cache, monkeypatch):
    base = {"model": "resnet50", "input_shape": [3, 224, 224], "num_classes": 1000,
            "optimizer": "sgd", "batch_size": 64}
    path = opcache.entry_path(opcache.cache_key("ops", base))
    assert opcache.entry_path(opcache.cache_key("ops", dict(base))) == path
    changed = {"model": "resnet18", "input_shape": [3, 64, 64], "num_classes": 10,
               "optimizer": "adam", "batch_size": 32}
    others = {opcache.entry_path(opcache.cache_key("ops", {**base, k: v}))
              for k, v in changed.items()}
    assert len(others) == len(changed) and path not in others
    monkeypatch.setattr(opcache, "_version", lambda dist: "9.9.9")
    assert opcache.entry_path(opcache.cache_key("ops", base)) != path
    monkeypatch.undo()
    monkeypatch.setattr(opcache, "FORMAT_VERSION", opcache.FORMAT_VERSION + 1)
    assert opcache.entry_path(opcache.cache_key("ops", base)) != path
    monkeypatch.undo()
    monkeypatch.setattr(opcache, "source_digest", lambda kind: "edited")
    assert opcache.entry_path(opcache.cache_key("ops", base)) != path


def test_source_digest_follows_the_counting_code(tmp_path, monkeypatch):
    """The counting module and what it imports (even inside a function) are in the key;
    other modules are not."""
    files = {"opcount.py": "from scalelab.workload import WorkloadSpec\n",
             "workload.py": "def f():\n    from scalelab import record\n",
             "record.py": "A = 1\n", "other.py": "B = 1\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(opcache, "_PACKAGE", tmp_path)

    def digest():
        opcache.source_digest.cache_clear()
        opcache._imported.cache_clear()
        return opcache.source_digest("ops")

    try:
        assert [p.name for p in opcache.source_files("ops")] == ["opcount.py", "record.py",
                                                                 "workload.py"]
        before = digest()
        (tmp_path / "other.py").write_text("B = 2\n")
        assert digest() == before
        for name in ("opcount.py", "workload.py", "record.py"):
            (tmp_path / name).write_text(files[name] + "# edited\n")
            assert digest() != before, name
            before = digest()
    finally:
        opcache.source_digest.cache_clear()
        opcache._imported.cache_clear()


def _imports_by_parsing(path: Path) -> frozenset[str]:
    """What :func:`opcache._imported` must find, from the file's syntax tree."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] == "scalelab")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "scalelab":
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return frozenset(names)


def test_imports_found_by_their_lines_are_the_syntax_trees(tmp_path):
    """The scan of import lines finds what parsing finds: in every file of the package, and
    in one that hides imports in a docstring, a comment, a string and a bracketed list."""
    odd = tmp_path / "odd.py"
    odd.write_text('''"""An example, no import:

    from scalelab.report import write_report
    import scalelab.advise
"""
import os, scalelab.paths as p, torch
from scalelab.plan import (  # the plan's names (some of them)
    Cluster,  # a class
    plan as make_plan,
)
from torch import nn
# from scalelab.runner import nothing
X = "import scalelab.results"


def f():
    from scalelab import workload, metashapes; import scalelab.errors
    return \'\'\'
from scalelab.theory import zero
\'\'\'
''')
    assert opcache._imported(odd) == _imports_by_parsing(odd) == {
        "scalelab.paths", "scalelab.plan", "scalelab.plan.Cluster", "scalelab.plan.plan",
        "scalelab", "scalelab.workload", "scalelab.metashapes", "scalelab.errors"}
    files = sorted(Path(opcache.__file__).parent.rglob("*.py"))
    assert len(files) > 50
    for path in files:
        assert opcache._imported(path) == _imports_by_parsing(path), path


def test_source_digest_is_kept_until_a_file_it_covers_changes(tmp_path, monkeypatch, cache):
    """The digest is read back (nothing parsed) while every file has its time and size; an
    edited file, a module that now exists where a name was imported, or a new data file
    makes it computed again."""
    pkg = tmp_path / "pkg"
    (pkg / "hardware").mkdir(parents=True)
    (pkg / "hardware" / "bands.py").write_text("from scalelab import extra\nA = 1\n")
    (pkg / "hardware" / "a.toml").write_text("x = 1\n")
    monkeypatch.setattr(opcache, "_PACKAGE", pkg)

    def digest():
        opcache.source_digest.cache_clear()
        opcache._imported.cache_clear()
        return opcache.source_digest("fit")

    def unparsed(path):
        raise AssertionError(f"{path} parsed again")

    try:
        first = digest()
        with monkeypatch.context() as m:
            m.setattr(opcache, "_imported", unparsed)
            opcache.source_digest.cache_clear()
            assert opcache.source_digest("fit") == first  # from the stamps
        (pkg / "extra.py").write_text("B = 1\n")  # the imported name is a module now
        second = digest()
        assert second != first
        assert "extra.py" in [p.name for p in opcache.source_files("fit")]
        (pkg / "hardware" / "b.toml").write_text("y = 2\n")
        third = digest()
        assert third != second
        extra = pkg / "extra.py"
        was = extra.stat().st_mtime_ns
        extra.write_text("B = 2\n")  # the same size, a later time
        os.utime(extra, ns=(was + 10**9, was + 10**9))
        assert digest() != third
    finally:
        opcache.source_digest.cache_clear()
        opcache._imported.cache_clear()


@pytest.mark.parametrize("garbage", [b"", b"not a pickle", pickle.dumps({"key": {}}),
                                     pickle.dumps(["a", "list"])])
def test_corrupt_entry_is_recounted(cache, counted, garbage):
    spec = WorkloadSpec("resnet50")
    opcache.step_ops(spec, 64)
    (entry,) = (cache / "ops").glob("*.pkl")
    entry.write_bytes(garbage)
    opcache.clear_memory()
    value = opcache.step_ops(spec, 64)
    assert len(counted) == 2 and value["call"] == 2
    opcache.clear_memory()
    assert opcache.step_ops(spec, 64) == value  # rewritten: read back, not counted
    assert len(counted) == 2


def test_an_unwritable_cache_still_counts(tmp_path, monkeypatch, counted):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SCALELAB_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delenv("SCALELAB_CACHE", raising=False)
    opcache.clear_memory()
    try:
        assert opcache.step_ops(WorkloadSpec("resnet50"), 8)["batch"] == 8
        assert opcache.step_ops(WorkloadSpec("resnet50"), 8)["call"] == 1  # memory
    finally:
        opcache.clear_memory()


def test_a_users_factory_is_not_kept_on_disk(cache, counted):
    spec = WorkloadSpec("tests.toy_models:mlp")
    opcache.step_ops(spec, 4)
    opcache.step_ops(spec, 4)
    assert len(counted) == 1  # remembered in the process
    assert not (cache / "ops").exists()
    opcache.clear_memory()
    opcache.step_ops(spec, 4)
    assert len(counted) == 2


def test_real_operations_round_trip(cache):
    spec = WorkloadSpec("squeezenet1_0", input_shape=(3, 64, 64), num_classes=10)
    counted = opcache.step_ops(spec, 4)
    opcache.clear_memory()
    read = opcache.step_ops(spec, 4)
    assert read is not counted and read == counted
    assert type(read) is type(opcount.step_ops(spec, 4))


def test_describe_is_cached(cache, monkeypatch):
    calls = []

    def fake(spec, flops=True):
        calls.append(flops)
        return ("info", spec.model, flops)

    monkeypatch.setattr(opcount, "describe", fake)
    spec = WorkloadSpec("resnet50")
    assert opcache.describe(spec, flops=False) == ("info", "resnet50", False)
    opcache.clear_memory()
    assert opcache.describe(spec, flops=False) == ("info", "resnet50", False)
    assert calls == [False]
    opcache.describe(spec, flops=True)
    assert calls == [False, True]


def test_memory_components_are_cached(cache, monkeypatch):
    from scalelab.profiler import memory

    calls = []
    monkeypatch.setattr(memory, "try_memory_components",
                        lambda spec: calls.append(spec.model) or {"param_bytes": 4})
    spec = WorkloadSpec("resnet50")
    assert opcache.memory_components(spec) == {"param_bytes": 4}
    opcache.clear_memory()
    assert opcache.memory_components(spec) == {"param_bytes": 4}
    assert calls == ["resnet50"]
    opcache.memory_components(WorkloadSpec("resnet50", optimizer="adam"))
    assert calls == ["resnet50", "resnet50"]


def test_fit_and_bands_are_cached(cache, monkeypatch):
    """Where the package's own fit is stale (here: as if the code had changed since it was
    written), the fit is computed once and kept on disk."""
    monkeypatch.setattr(packaged, "current", lambda: None)
    calls = []
    monkeypatch.setattr(fitmod, "fit", lambda: calls.append("fit") or "F")
    monkeypatch.setattr(bandsmod, "bands", lambda: calls.append("bands") or "B")
    assert packaged.fit_and_bands() == ("F", "B")
    opcache.clear_memory()
    assert packaged.fit_and_bands() == ("F", "B")
    assert calls == ["fit", "bands"]
    assert len(list((cache / "fit").glob("*.pkl"))) == 1


def test_a_current_packaged_fit_is_used_without_counting(cache, monkeypatch):
    monkeypatch.setattr(packaged, "current", lambda: ("PF", "PB"))
    monkeypatch.setattr(fitmod, "fit", lambda: pytest.fail("fitted with the package's fit"))
    monkeypatch.setattr(bandsmod, "bands", lambda: pytest.fail("bands with the package's"))
    assert packaged.fit_and_bands() == ("PF", "PB")
    assert not (cache / "fit").exists()


def test_cache_dir_from_the_environment(tmp_path, monkeypatch):
    for name in ("SCALELAB_CACHE", "SCALELAB_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_dir() == Path(tmp_path / "home" / ".cache" / "scalelab")
    monkeypatch.setenv("SCALELAB_CACHE_DIR", str(tmp_path / "mine"))
    assert paths.cache_dir() == tmp_path / "mine"


def test_the_test_session_does_not_write_to_home():
    assert not str(paths.cache_dir()).startswith(str(Path.home() / ".cache"))
