"""The machines to plan for: DESIGN.md's ``cluster.toml`` as a validated dataclass.

Precedence: command line > file > defaults (:func:`load_cluster`). Every link is named
from the hardware catalog or given as a rate in Gb/s of payload per direction.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalelab import hardware
from scalelab.errors import UsageError
from scalelab.plan.step import ARCHITECTURES
from scalelab.results import read_toml
from scalelab.theory import sharding
from scalelab.theory.units import gbps_to_Bps

PLACEMENTS = ("dedicated", "colocated")

@dataclass(frozen=True)
class Cluster:
    """The machines to plan for (DESIGN.md's cluster.toml). Validated on creation."""

    nodes: int = 1
    gpus_per_node: int = 1
    device: str | None = None
    intra_node: str | None = None
    intra_node_gbps: float | None = None
    network: str | None = None
    network_gbps: float | None = None
    architecture: str = "ps"
    local_aggregation: bool = True
    ps: str | int = "auto"
    ps_placement: str = "dedicated"
    ps_network: str | None = None
    ps_network_gbps: float | None = None
    ps_partition: str = "balanced"
    overlap: float | None = None
    latency_s: float | None = None
    full_duplex: bool = False
    price_per_gpu_hour: float | None = None

    def __post_init__(self):
        for name in ("nodes", "gpus_per_node"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UsageError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("intra_node_gbps", "network_gbps", "ps_network_gbps"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not v > 0):
                raise UsageError(f"{name} must be > 0 Gb/s, got {v!r}")
        if self.architecture not in ARCHITECTURES:
            raise UsageError(f"unknown architecture {self.architecture!r} "
                             f"({', '.join(ARCHITECTURES)})")
        if self.ps_placement not in PLACEMENTS:
            raise UsageError(f"unknown ps_placement {self.ps_placement!r} "
                             f"({', '.join(PLACEMENTS)})")
        if self.ps_partition not in sharding.POLICIES:
            raise UsageError(f"unknown ps_partition {self.ps_partition!r} "
                             f"({', '.join(sharding.POLICIES)})")
        if self.ps != "auto":
            try:
                ps = int(self.ps)
            except (TypeError, ValueError):
                raise UsageError(f"ps must be 'auto' or an integer >= 1, got {self.ps!r}") from None
            if ps < 1 or isinstance(self.ps, bool) or ps != float(self.ps):
                raise UsageError(f"ps must be 'auto' or an integer >= 1, got {self.ps!r}")
            object.__setattr__(self, "ps", ps)
        if self.overlap is not None and not 0 <= self.overlap <= 1:
            raise UsageError(f"overlap must be in [0, 1], got {self.overlap}")
        if self.latency_s is not None and not self.latency_s >= 0:
            raise UsageError(f"latency_s must be >= 0, got {self.latency_s}")
        if self.price_per_gpu_hour is not None and not self.price_per_gpu_hour > 0:
            raise UsageError(f"price_per_gpu_hour must be > 0, got {self.price_per_gpu_hour}")
        if self.device is not None:
            object.__setattr__(self, "device", hardware.device(self.device).name)
        if self.network is not None:
            object.__setattr__(self, "network", hardware.network(self.network).name)
        if self.ps_network is not None:
            object.__setattr__(self, "ps_network", hardware.network(self.ps_network).name)
        if self.intra_node is not None:
            object.__setattr__(self, "intra_node", hardware.link(self.intra_node).name)
        if self.network is None and self.network_gbps is None:
            known = ", ".join(hardware.catalog().networks)
            raise UsageError("name the network: network = NAME or network_gbps = X "
                             f"(--network/--network-gbps; known: {known})")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def network_Bps(self) -> float:
        """Per-node NIC, per direction: payload rate of the named network or network_gbps."""
        if self.network_gbps is not None:
            return gbps_to_Bps(self.network_gbps)
        return hardware.network(self.network).payload_Bps

    def ps_network_Bps(self) -> float:
        if self.ps_network_gbps is not None:
            return gbps_to_Bps(self.ps_network_gbps)
        if self.ps_network is not None:
            return hardware.network(self.ps_network).payload_Bps
        return self.network_Bps()

    def intra_link(self) -> tuple[float, str]:
        """(bandwidth per direction, how it was chosen)."""
        if self.intra_node_gbps is not None:
            return gbps_to_Bps(self.intra_node_gbps), f"{self.intra_node_gbps:g} Gb/s (given)"
        if self.intra_node is not None:
            lk = hardware.link(self.intra_node)
            return lk.bandwidth_Bps, lk.title
        if self.device is not None and hardware.device(self.device).intra_node:
            lk = hardware.link(hardware.device(self.device).intra_node)
            return lk.bandwidth_Bps, f"{lk.title} (the {self.device}'s link)"
        lk = hardware.link("pcie3")
        return lk.bandwidth_Bps, f"{lk.title} (assumed: no intra_node given)"

    def network_label(self) -> str:
        if self.network_gbps is not None:
            return f"{self.network_gbps:g} Gb/s"
        return str(self.network)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_CLUSTER_KEYS = {f.name for f in dataclasses.fields(Cluster)}


def load_cluster(path: str | Path | None = None, overrides: dict[str, Any] | None = None
                 ) -> Cluster:
    """Cluster from defaults < ``path`` (cluster.toml) < ``overrides`` (None means unset)."""
    values: dict[str, Any] = {}
    if path is not None:
        where = str(path)
        values = read_toml(path)
        unknown = sorted(set(values) - _CLUSTER_KEYS)
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(_CLUSTER_KEYS))})")
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        if k not in _CLUSTER_KEYS:
            raise UsageError(f"unknown cluster setting {k!r}")
        values[k] = v
        # A name and a rate for the same link: the one given last (the command line) wins.
        for a, b in (("network", "network_gbps"), ("ps_network", "ps_network_gbps"),
                     ("intra_node", "intra_node_gbps")):
            if k == a:
                values.pop(b, None)
            elif k == b:
                values.pop(a, None)
    return Cluster(**values)

