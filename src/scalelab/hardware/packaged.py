"""The reference table's fit and bands as shipped with the package (``hardware/fit.json``).

Fitting the reference table (:func:`scalelab.hardware.fit.fit` and its leave-one-out
:func:`~scalelab.hardware.bands.bands`) first counts the operations of every model in it, so a
plan on a machine with an empty cache would spend most of its time there. The result depends
only on the table and the code that counts and fits it, so it is computed once, written here
with the digest of those files (:func:`scalelab.opcache.source_digest`, kind ``"fit"``), and
read back whenever that digest is the current one; after any change to those files the file
is stale, ignored, and the fit is computed (and cached) as before, until it is written again:

    python -m scalelab.hardware.packaged --write     (make fit)

The operations are counted with the torch and torchvision versions named in the file; a fit
computed under other versions may differ where their operators decompose differently.
Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scalelab.hardware.bands import Bands
    from scalelab.hardware.fit import Fit

PATH = Path(__file__).resolve().parent / "fit.json"
FORMAT = 1


def _device_fit(d: dict):
    from scalelab.hardware.fit import DeviceFit

    return DeviceFit(**d)


def to_dict(f: Fit, b: Bands) -> dict[str, Any]:
    """``f`` and ``b`` as JSON values, every float as Python writes it (exact)."""
    return {
        "fit": {
            "devices": [[d, c, asdict(v)] for (d, c), v in sorted(f.devices.items())],
            "pooled": {c: asdict(v) for c, v in sorted(f.pooled.items())},
            "by_generation": f.by_generation,
            "groups": [[d, c, sorted(g)] for (d, c), g in sorted(f.groups.items())],
            "factors": {c: [list(t) for t in fs] for c, fs in sorted(f.factors.items())},
        },
        "bands": {
            "seen": dict(sorted(b.seen.items())), "unseen": dict(sorted(b.unseen.items())),
            "fitted": sorted([d, c] for d, c in b.fitted), "host": b.host,
            "host_cases": b.host_cases, "model_cases": dict(sorted(b.model_cases.items())),
        },
    }


def from_dict(d: dict[str, Any]) -> tuple[Fit, Bands]:
    """The (Fit, Bands) that :func:`to_dict` wrote."""
    from scalelab.hardware.bands import Bands
    from scalelab.hardware.fit import Fit

    f, b = d["fit"], d["bands"]
    fit = Fit(devices={(dev, c): _device_fit(v) for dev, c, v in f["devices"]},
              pooled={c: _device_fit(v) for c, v in f["pooled"].items()},
              by_generation=bool(f["by_generation"]),
              groups={(dev, c): frozenset(g) for dev, c, g in f["groups"]},
              factors={c: tuple((str(n), float(kc), float(km)) for n, kc, km in fs)
                       for c, fs in f["factors"].items()})
    bands = Bands(seen={c: float(v) for c, v in b["seen"].items()},
                  unseen={c: float(v) for c, v in b["unseen"].items()},
                  fitted=frozenset((dev, c) for dev, c in b["fitted"]),
                  host=float(b["host"]), host_cases=int(b["host_cases"]),
                  model_cases={c: int(v) for c, v in b["model_cases"].items()})
    return fit, bands


def _digest() -> str:
    from scalelab.opcache import source_digest

    return source_digest("fit")


def read(path: Path = PATH) -> dict[str, Any] | None:
    """The file's content, or None when it is missing or not this format."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        return None
    return d


@cache
def current_file() -> dict[str, Any] | None:
    """The file's content when it was written by the code and table there are now (its
    digest is the current one), else None."""
    d = read()
    return d if d is not None and d.get("source") == _digest() else None


@cache
def current() -> tuple[Fit, Bands] | None:
    """The packaged (Fit, Bands) of :func:`current_file`, else None (compute the fit)."""
    d = current_file()
    if d is None:
        return None
    try:
        return from_dict(d)
    except (KeyError, TypeError, ValueError):
        return None


def fit_and_bands() -> tuple[Fit, Bands]:
    """The reference table's fit and its leave-one-out bands as a plan reads them: the
    package's own (:func:`current`) where this code and table wrote it, else computed once
    per content of the reference data and the code that fits it, and kept in the cache
    (:func:`scalelab.opcache.cached`, kind ``"fit"``)."""
    shipped = current()
    if shipped is not None:
        return shipped
    from scalelab.opcache import cached

    def run():
        from scalelab.hardware import bands, fit

        return fit.fit(), bands.bands()

    return cached("fit", {}, run)


def write(path: Path = PATH) -> dict[str, Any]:
    """Fit the reference table now and write the result with the current digest."""
    from importlib import metadata

    from scalelab.hardware.bands import bands
    from scalelab.hardware.fit import fit
    from scalelab.results import write_text_atomic

    d = {"format": FORMAT, "source": _digest(),
         "torch": metadata.version("torch"), "torchvision": metadata.version("torchvision"),
         **to_dict(fit(), bands())}
    write_text_atomic(path, json.dumps(d, indent=1) + "\n")
    current_file.cache_clear()
    current.cache_clear()
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scalelab.hardware.packaged",
                                 description="Check or write the packaged fit "
                                             "(hardware/fit.json).")
    ap.add_argument("--write", action="store_true",
                    help="fit the reference table now and write the file")
    args = ap.parse_args(argv)
    if args.write:
        d = write()
        print(f"wrote {PATH} (torch {d['torch']}, {len(d['fit']['devices'])} device fits)")
        return 0
    d = read()
    if d is None:
        print(f"{PATH}: missing or unreadable; write it with --write")
        return 1
    if d.get("source") != _digest():
        print(f"{PATH}: stale (the fit's code or reference table changed); write it again "
              "with --write")
        return 1
    print(f"{PATH}: current (torch {d.get('torch')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
