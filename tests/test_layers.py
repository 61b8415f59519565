"""Imports go down only: no module of the package imports one that imports it back (even
inside a function), and no layer imports a layer above it."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest first; a module may import its own layer or one below. A module not named here
# (errors, results, workload, opcount ...) is held by the cycle check alone.
LAYERS = (
    ("scalelab.theory",),
    ("scalelab.hardware",),
    ("scalelab.plan",),
    ("scalelab.experiment",),
    ("scalelab.report", "scalelab.cli", "scalelab.advise"),
)


def _module_name(path: Path, src: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """``name`` as a module of the package: itself, or the module that defines it
    (``scalelab.plan.step.ModelParams`` -> ``scalelab.plan.step``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(path: Path, me: str, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``path`` imports anywhere in it, in a function too; a
    ``from package import name`` counts the submodule where ``name`` is one, else the
    package."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            if t.split(".")[0] == "scalelab" and (m := _resolve(t, known)) is not None:
                found.add(m)
    return {m for m in found if m != me}


def graph(src: Path = SRC) -> dict[str, set[str]]:
    """Each module of ``src``'s ``scalelab`` package -> the package's modules it imports."""
    known = {_module_name(p, src): p for p in (src / "scalelab").rglob("*.py")}
    return {name: imports(path, name, known) for name, path in known.items()}


def _in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def _without_package_faces(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` that hands its submodules' names on imports them, and they
    import the package's other names through it: that is not a loop of the code, so the
    edges from a package to its own submodules are left out."""
    return {m: {t for t in ts if not (_in_package(t, m) and t != m)} for m, ts in g.items()}


def test_the_scan_sees_imports_at_every_depth(tmp_path):
    pkg = tmp_path / "scalelab"
    (pkg / "plan").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "plan" / "__init__.py").write_text("")
    (pkg / "plan" / "step.py").write_text("X = 1\n")
    (pkg / "low.py").write_text(
        '"""from scalelab.high import nothing"""\n'
        "def f():\n    from scalelab.plan.step import X\n    import scalelab.high\n")
    (pkg / "high.py").write_text("from scalelab import low\n")
    g = graph(tmp_path)
    assert g["scalelab.low"] == {"scalelab.plan.step", "scalelab.high"}
    assert g["scalelab.high"] == {"scalelab.low"}
    assert _cycles(_without_package_faces(g)) == [["scalelab.high", "scalelab.low"]]


def test_no_module_imports_one_that_imports_it_back():
    g = _without_package_faces(graph())
    assert len(g) > 100  # the whole package was read
    assert _cycles(g) == []


def test_no_layer_imports_a_layer_above_it():
    g = graph()
    level = {}
    for i, packages in enumerate(LAYERS):
        for p in packages:
            level[p] = i

    def layer(module: str) -> int | None:
        for p, i in level.items():
            if _in_package(module, p):
                return i
        return None

    upward = sorted(f"{m} -> {t}" for m, ts in g.items() for t in ts
                    if layer(m) is not None and layer(t) is not None and layer(t) > layer(m))
    assert upward == []
