"""Where scalelab keeps things: the per-user cache and the example files shipped with it.

Light on purpose (no torch, no numpy): the command line's parsers and the plan read these.
"""

from __future__ import annotations

import os
from pathlib import Path

from scalelab.errors import UsageError

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"
"""Cluster and workload files a user can start from, shipped inside the package."""


def cache_dir() -> Path:
    """The per-user cache: ``$SCALELAB_CACHE`` or ``$SCALELAB_CACHE_DIR`` (the first set),
    else ``$XDG_CACHE_HOME/scalelab``, else ``~/.cache/scalelab``."""
    for name in ("SCALELAB_CACHE", "SCALELAB_CACHE_DIR"):
        if os.environ.get(name):
            return Path(os.environ[name])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "scalelab"


def default_clusters() -> list[Path]:
    """The example cluster files shipped with scalelab."""
    return sorted(EXAMPLES_DIR.glob("cluster-*.toml")) if EXAMPLES_DIR.is_dir() else []


def example_names() -> list[str]:
    """Names of the shipped example cluster files (without ``.toml``)."""
    return [p.stem for p in default_clusters()]


def resolve_example(arg: str | os.PathLike, option: str = "--cluster") -> Path:
    """A file argument: the file, else the name of a file shipped in :data:`EXAMPLES_DIR`
    (``cluster-4x8-a100-100gbe``, ``workload.toml``; ``.toml`` optional), so that the
    examples in ``--help`` work from any folder. A file here wins over an example."""
    path = Path(arg)
    if path.exists() or path.parent != Path("."):
        return path
    shipped = EXAMPLES_DIR / (path.name if path.suffix == ".toml" else f"{path.name}.toml")
    if shipped.is_file():
        return shipped
    names = sorted(p.stem for p in EXAMPLES_DIR.glob("*.toml")) if EXAMPLES_DIR.is_dir() else []
    raise UsageError(f"{option} {arg}: no such file, and no shipped example of that name "
                     f"(examples: {', '.join(names) or 'none installed'})")


def resolve_cluster(arg: str | os.PathLike) -> Path:
    """A ``--cluster`` argument: a file, or a shipped example's name."""
    return resolve_example(arg, "--cluster")
