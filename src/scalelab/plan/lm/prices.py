"""Prices per GPU-hour, each with where it came from.

A price comes from the cluster (``price_per_gpu_hour`` in cluster.toml, or
``plan --price-per-gpu-hour``), else from the hardware catalog's ``[prices.DEVICE]`` table
(``per_gpu_hour``, ``source``, ``date``: a listed rate, which changes often). A device with
neither has no price: an objective that needs one says so.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Price:
    """One GPU for one hour."""

    per_gpu_hour: float
    """US dollars (or the user's currency, when the user gave it)."""
    source: str
    """Where it came from."""
    date: str | None = None
    """When it was listed (catalog prices)."""

    def to_dict(self) -> dict:
        return {"per_gpu_hour": self.per_gpu_hour, "source": self.source, "date": self.date}


@lru_cache(maxsize=1)
def catalog_prices() -> dict[str, Price]:
    """The catalog's ``[prices]`` table, read once."""
    text = resources.files("scalelab.hardware").joinpath("catalog.toml").read_text()
    table = tomllib.loads(text).get("prices") or {}
    return {name: Price(float(v["per_gpu_hour"]), str(v["source"]), v.get("date"))
            for name, v in table.items()}


def price_of(cluster) -> Price | None:
    """The cluster's price per GPU-hour: as given, else the catalog's for its device."""
    if cluster.price_per_gpu_hour is not None:
        return Price(float(cluster.price_per_gpu_hour), "given (price_per_gpu_hour)")
    return catalog_prices().get(cluster.device) if cluster.device else None
