"""The hardware catalog: devices, device links and networks, each figure with its source.

The data is ``catalog.toml`` beside this file. Lookups accept a catalog name or an alias,
case-insensitively; an unknown name raises :class:`~scalelab.errors.UsageError` listing the
known ones. A device whose peak is not known (``cpu``) has ``None`` for its TFLOPS: it is
reported as unknown, never guessed.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from scalelab.errors import UsageError
from scalelab.theory.units import gbps_to_Bps

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

# GPU architecture generations per vendor, oldest first (a device's `generation`).
GENERATIONS = {
    "nvidia": ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper",
               "blackwell"),
    "amd": ("cdna", "cdna2", "cdna3"),
}


def generation_rank(name: str | None) -> tuple[str, int] | None:
    """(vendor, index in that vendor's generations) of a GPU generation; None if unknown."""
    for vendor, names in GENERATIONS.items():
        if name in names:
            return vendor, names.index(name)
    return None


@dataclass(frozen=True)
class Device:
    name: str
    source: str
    fp32_tflops: float | None = None
    tf32_tflops: float | None = None
    bf16_tflops: float | None = None
    fp16_tflops: float | None = None
    fp8_tflops: float | None = None  # dense FP8 tensor-core peak (Hopper, Blackwell)
    fp8_source: str | None = None
    memory_bytes: int | None = None
    memory_bandwidth_Bps: float | None = None
    intra_node: str | None = None
    aliases: tuple[str, ...] = field(default_factory=tuple)
    generation: str | None = None  # the GPU architecture generation (one of GENERATIONS)
    platform: str | None = None  # the node this device usually comes in (DGX-style)
    gpus_per_nic: int | None = None  # that platform's GPUs per compute NIC
    cpu_cores_per_node: int | None = None  # that platform's host CPU cores
    platform_source: str | None = None
    host_link: str | None = None  # each device's link to the host CPU (PCIe generation)
    gpus_per_host_link: int | None = None  # that platform's GPUs behind one PCIe switch uplink
    host_link_source: str | None = None

    def peak_flops(self, precision: str = "fp32") -> float | None:
        """Dense peak FLOP/s at ``precision`` (``fp8`` too: the FP8 tensor cores' dense
        peak); None when unknown or not supported."""
        if precision not in PRECISIONS and precision != "fp8":
            raise UsageError(f"unknown precision {precision!r} ({', '.join(PRECISIONS)}, fp8)")
        tflops = getattr(self, f"{precision}_tflops")
        return None if tflops is None else tflops * 1e12

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["aliases"] = list(self.aliases)
        return d


@dataclass(frozen=True)
class Link:
    name: str
    title: str
    bandwidth_Bps: float
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Network:
    name: str
    gbps: float  # nominal data rate per direction, as the name says
    payload_gbps: float  # per-direction payload after encoding and framing
    source: str
    aliases: tuple[str, ...] = field(default_factory=tuple)

    @property
    def nominal_Bps(self) -> float:
        return gbps_to_Bps(self.gbps)

    @property
    def payload_Bps(self) -> float:
        return gbps_to_Bps(self.payload_gbps)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gbps": self.gbps, "payload_gbps": self.payload_gbps,
                "payload_Bps": self.payload_Bps, "source": self.source,
                "aliases": list(self.aliases)}


@dataclass(frozen=True)
class Catalog:
    devices: dict[str, Device]
    links: dict[str, Link]
    networks: dict[str, Network]


@lru_cache(maxsize=1)
def catalog() -> Catalog:
    """The packaged catalog, parsed once."""
    text = resources.files(__name__).joinpath("catalog.toml").read_text()
    data = tomllib.loads(text)
    devices = {
        name: Device(name=name, aliases=tuple(d.pop("aliases", ())), **d)
        for name, d in ((n, dict(v)) for n, v in data["devices"].items())
    }
    links = {
        name: Link(name=name, title=v["name"], bandwidth_Bps=float(v["bandwidth_Bps"]),
                   source=v["source"])
        for name, v in data["links"].items()
    }
    networks = {
        name: Network(name=name, gbps=float(v["gbps"]), payload_gbps=float(v["payload_gbps"]),
                      source=v["source"], aliases=tuple(v.get("aliases", ())))
        for name, v in data["networks"].items()
    }
    return Catalog(devices, links, networks)


@lru_cache(maxsize=8)
def _index(table: str) -> dict:
    """{lower-case name or alias: entry} of the catalog's ``table``; the first entry that
    claims a name keeps it."""
    out: dict = {}
    for entry_name, entry in getattr(catalog(), table).items():
        for n in (entry_name, *getattr(entry, "aliases", ())):
            out.setdefault(n.lower(), entry)
    return out


def _get(table: str, name: str):
    """The entry of ``table`` named or aliased ``name`` (any case), or None."""
    return _index(table).get(str(name).strip().lower())


def _find(kind: str, table: str, name: str):
    found = _get(table, name)
    if found is not None:
        return found
    known = list(getattr(catalog(), table))
    close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UsageError(f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})")


def device(name: str) -> Device:
    return _find("device", "devices", name)


def link(name: str) -> Link:
    return _find("intra-node link", "links", name)


def network(name: str) -> Network:
    return _find("network", "networks", name)


def match_device(reported_name: str | None) -> Device | None:
    """The catalog device a profile's reported device name refers to, or None.

    Matches a name or alias exactly (case-insensitive), then a catalog name contained in the
    reported one (``"NVIDIA H100 80GB HBM3"`` -> H100-SXM). A CPU profile matches ``cpu``.
    """
    if not reported_name:
        return None
    key = str(reported_name).strip().lower()
    devices = catalog().devices
    for entry in devices.values():
        if key in (n.lower() for n in (entry.name, *entry.aliases)):
            return entry
    for entry in sorted(devices.values(), key=lambda d: -len(d.name)):
        # whole words only: "A10" must not match "NVIDIA A100 ..."
        if entry.name != "cpu" and re.search(
                rf"(?<![a-z0-9]){re.escape(entry.name.lower())}(?![a-z0-9])", key):
            return entry
    return None


def lookup(name: str) -> tuple[str, Device | Link | Network]:
    """Any catalog entry by name: ('device'|'link'|'network', entry)."""
    cat = catalog()
    for kind, table in (("device", "devices"), ("link", "links"), ("network", "networks")):
        found = _get(table, name)
        if found is not None:
            return kind, found
    known = [*cat.devices, *cat.links, *cat.networks]
    close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UsageError(f"unknown hardware {name!r}{hint} (known: {', '.join(known)})")
