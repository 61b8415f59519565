"""The machines to plan for: DESIGN.md's ``cluster.toml`` as a validated dataclass.

Precedence: command line > file > defaults (:func:`load_cluster`). Every link is named
from the hardware catalog or given as a rate in Gb/s of payload per direction.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalelab import hardware
from scalelab.errors import UsageError, is_number
from scalelab.plan.step import ARCHITECTURES
from scalelab.results import read_toml
from scalelab.theory import sharding
from scalelab.theory.units import Bps_to_gbps, gbps_to_Bps

PLACEMENTS = ("dedicated", "colocated")
GRAD_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}  # bytes per exchanged gradient element

def _check_number(name: str, v: Any, unit: str = "", low: str = ">") -> None:
    """UsageError unless ``v`` is None or a finite number > 0 (``low=">="``: >= 0)."""
    if v is not None and not (is_number(v) and (v > 0 if low == ">" else v >= 0)):
        finite = " and finite" if isinstance(v, float) and not math.isfinite(v) else ""
        raise UsageError(f"{name} must be {low} 0{unit}{finite}, got {v!r}")


@dataclass(frozen=True)
class Cluster:
    """The machines to plan for (DESIGN.md's cluster.toml). Validated on creation."""

    nodes: int = 1
    """Machines with devices."""
    gpus_per_node: int = 1
    """Devices per machine."""
    device: str | None = None
    """Hardware catalog name of the devices (None: the profiled device)."""
    intra_node: str | None = None
    """Device-to-device link inside a machine (catalog name: nvlink3, pcie4, ...)."""
    intra_node_gbps: float | None = None
    """...or its rate in Gb/s per direction."""
    network: str | None = None
    """NIC (catalog name: 10GbE, 100GbE, HDR, ...)."""
    network_gbps: float | None = None
    """...or its payload rate in Gb/s per direction."""
    architecture: str | None = None
    """ps | allreduce | hierarchical: the one planned and recommended (the others are shown
    as alternatives); None: not named, the fastest that keeps the target is recommended."""
    local_aggregation: bool = True
    """ps: reduce inside the machine before pushing (N_w = nodes)."""
    ps: str | int = "auto"
    """Parameter servers: 'auto' or a count."""
    ps_placement: str | None = None
    """dedicated machines, or colocated on the nodes' CPUs: any count, ``floor(ps/nodes)`` on
    every node and one more on the first ``ps mod nodes`` (one per node by default). None:
    dedicated, except on a single node without a network, where they run on its CPU."""
    ps_network: str | None = None
    """Dedicated servers' NIC (catalog name; default: the workers')."""
    ps_network_gbps: float | None = None
    """...or its rate in Gb/s."""
    ps_partition: str = "balanced"
    """Shards: even chunks (balanced) or whole tensors (tensor)."""
    overlap: float | None = None
    """Fraction of the exchange hidden behind backward (None: derived for DDP, 0 for ps)."""
    latency_s: float | None = None
    """Per-message latency, seconds."""
    full_duplex: bool = False
    """ps: pushes and pulls pipelined."""
    price_per_gpu_hour: float | None = None
    """Price of one device for one hour."""
    gpus_per_nic: int | None = None
    """Devices sharing one NIC (None: the named ``platform``'s, else one NIC per node)."""
    platform: str | None = None
    """The node the devices come in, where it sets the links: ``dgx`` (or the device's
    platform by name, e.g. "DGX A100") takes that platform's NICs per GPU from the catalog;
    None: one NIC per node unless ``gpus_per_nic`` says more."""
    host_link: str | None = None
    """Each device's link to the host CPU (catalog name: pcie3, pcie4, pcie5)."""
    host_link_gbps: float | None = None
    """...or its rate in Gb/s per direction."""
    gpus_per_host_link: int | None = None
    """Devices behind one PCIe switch uplink to the host (None: the device's platform, else 1)."""
    grad_dtype: str = "fp32"
    """Precision of the exchanged gradients: fp32, bf16, fp16."""
    accumulation_steps: int = 1
    """Micro-batches per exchange (gradient accumulation)."""
    ddp_bucket_mb: float = 25.0
    """All-reduce bucket size, MiB (DDP's bucket_cap_mb)."""
    precision: str | None = None
    """Precision the devices compute in (None: PyTorch's default on that device)."""
    cpu_cores_per_node: int | None = None
    """Host CPU cores per machine (None: the device's platform, else unknown)."""
    measured_network_Bps: float | None = None
    """A NIC rate measured on the real link, bytes/s per direction (wins over the names)."""

    def __post_init__(self):
        for name in _NAMES:  # a name given as a list or a number: one line, not a traceback
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise UsageError(f"{name} must be a name (a string), got {v!r}")
        for name in ("nodes", "gpus_per_node"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UsageError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("intra_node_gbps", "network_gbps", "ps_network_gbps", "host_link_gbps"):
            _check_number(name, getattr(self, name), " Gb/s")
        for name in ("local_aggregation", "full_duplex"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.architecture is not None and self.architecture not in ARCHITECTURES:
            raise UsageError(f"unknown architecture {self.architecture!r} "
                             f"({', '.join(ARCHITECTURES)})")
        if self.ps_placement is None:
            alone = self.nodes == 1 and self.network is None and self.network_gbps is None \
                and self.measured_network_Bps is None
            object.__setattr__(self, "ps_placement", "colocated" if alone else "dedicated")
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
        if self.overlap is not None and not (is_number(self.overlap) and 0 <= self.overlap <= 1):
            raise UsageError(f"overlap must be in [0, 1], got {self.overlap!r}")
        _check_number("latency_s", self.latency_s, low=">=")
        self._check_topology()
        _check_number("price_per_gpu_hour", self.price_per_gpu_hour)
        if self.device is not None:
            object.__setattr__(self, "device", hardware.device(self.device).name)
        if self.network is not None:
            object.__setattr__(self, "network", hardware.network(self.network).name)
        if self.ps_network is not None:
            object.__setattr__(self, "ps_network", hardware.network(self.ps_network).name)
        if self.intra_node is not None:
            object.__setattr__(self, "intra_node", hardware.link(self.intra_node).name)
        if self.host_link is not None:
            object.__setattr__(self, "host_link", hardware.link(self.host_link).name)
        _check_number("measured network bandwidth", self.measured_network_Bps, " B/s")
        if not self.has_network and (self.nodes > 1 or self.ps_placement == "dedicated"):
            known = ", ".join(hardware.catalog().networks)
            why = ("dedicated parameter servers are reached over it" if self.nodes == 1
                   else f"{self.nodes} nodes exchange over it")
            raise UsageError(f"name the network ({why}): network = NAME or network_gbps = X "
                             f"(--network/--network-gbps; known: {known})")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def has_network(self) -> bool:
        """Whether a network was named (a single node with its servers on its CPU needs none)."""
        return not (self.network is None and self.network_gbps is None
                    and self.measured_network_Bps is None)

    def network_Bps(self) -> float:
        """Per-node NIC, per direction: payload rate of the named network or network_gbps;
        infinite on a single node without one (no byte of its exchange crosses a NIC)."""
        if not self.has_network:
            return math.inf
        if self.measured_network_Bps is not None:
            return self.measured_network_Bps
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

    def intra_link_assumed(self) -> bool:
        """Whether :meth:`intra_link` assumed PCIe 3.0: no link given and none known for the
        device."""
        return (self.intra_node_gbps is None and self.intra_node is None
                and not (self.device is not None and hardware.device(self.device).intra_node))

    def _check_topology(self) -> None:
        for name in ("gpus_per_nic", "gpus_per_host_link", "accumulation_steps",
                     "cpu_cores_per_node"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise UsageError(f"{name} must be an integer >= 1, got {v!r}")
        if self.grad_dtype not in GRAD_DTYPES:
            raise UsageError(f"unknown grad_dtype {self.grad_dtype!r} "
                             f"({', '.join(GRAD_DTYPES)})")
        if self.precision is not None and self.precision not in hardware.PRECISIONS:
            raise UsageError(f"unknown precision {self.precision!r} "
                             f"({', '.join(hardware.PRECISIONS)})")
        _check_number("ddp_bucket_mb", self.ddp_bucket_mb)
        if self.platform is not None:
            if not isinstance(self.platform, str):
                raise UsageError(f"platform must be a name (e.g. \"dgx\"), got "
                                 f"{self.platform!r}")
            self.named_platform()

    def named_platform(self) -> hardware.Device | None:
        """The device whose catalog platform ``platform`` names (None: none named)."""
        if self.platform is None:
            return None
        dev = hardware.device(self.device) if self.device else None
        if dev is None or not dev.platform:
            raise UsageError(f"platform {self.platform!r}: the catalog knows no platform for "
                             f"{self.device or 'an unnamed device'}: give gpus_per_nic instead")
        name = self.platform.strip().lower()
        if name not in ("dgx", dev.platform.lower()) and not (
                name.startswith("dgx") and dev.platform.lower().startswith(name)):
            raise UsageError(f"platform {self.platform!r} is not the {dev.name}'s "
                             f"({dev.platform}): name that one, 'dgx', or give gpus_per_nic")
        return dev

    def nic_sharing(self) -> tuple[int, str]:
        """(devices per NIC, where that comes from): ``gpus_per_nic``, else the named
        platform's, else one NIC per node (what a cluster file naming one network means)."""
        if self.gpus_per_nic is not None:
            return self.gpus_per_nic, f"{self.gpus_per_nic} per NIC (given)"
        dev = self.named_platform()
        if dev is not None and dev.gpus_per_nic:
            return dev.gpus_per_nic, (f"{dev.gpus_per_nic} per NIC, as in a {dev.platform} "
                                      f"({dev.platform_source})")
        return self.gpus_per_node, ("one NIC per node (assumed: neither gpus_per_nic nor a "
                                    "platform given)")

    def host_link_Bps(self) -> tuple[float | None, str]:
        """(each device's host link per direction, how it was chosen); None: unknown."""
        if self.host_link_gbps is not None:
            return gbps_to_Bps(self.host_link_gbps), f"{self.host_link_gbps:g} Gb/s (given)"
        name = self.host_link
        how = "given"
        if name is None and self.device is not None:
            dev = hardware.device(self.device)
            name = dev.host_link or (dev.intra_node if (dev.intra_node or "").startswith("pcie")
                                     else None)
            how = f"the {dev.name}'s host link"
        if name is None:
            return None, "unknown"
        lk = hardware.link(name)
        return lk.bandwidth_Bps, f"{lk.title} ({how})"

    def cpu_cores(self) -> tuple[int | None, str]:
        """(host cores per node for input loaders, where that comes from); None: unknown."""
        if self.cpu_cores_per_node is not None:
            return self.cpu_cores_per_node, f"{self.cpu_cores_per_node} cores (given)"
        dev = hardware.device(self.device) if self.device else None
        if dev is not None and dev.cpu_cores_per_node:
            return dev.cpu_cores_per_node, (f"{dev.cpu_cores_per_node} cores, as in a "
                                            f"{dev.platform} ({dev.platform_source})")
        return None, "unknown (give cpu_cores_per_node)"

    def host_link_sharing(self) -> tuple[int, str]:
        """(devices behind one host-link uplink, where that comes from)."""
        if self.gpus_per_host_link is not None:
            return self.gpus_per_host_link, f"{self.gpus_per_host_link} per PCIe uplink (given)"
        dev = hardware.device(self.device) if self.device else None
        if dev is not None and dev.gpus_per_host_link:
            return dev.gpus_per_host_link, (f"{dev.gpus_per_host_link} per PCIe switch, as in "
                                            f"its platform ({dev.host_link_source})")
        return 1, "one device per host link (no gpus_per_host_link given)"

    def grad_bytes(self, param_bytes: float) -> float:
        """S_p at the exchange's precision, from fp32 parameter bytes."""
        return param_bytes * GRAD_DTYPES[self.grad_dtype] / 4

    def network_label(self) -> str:
        if not self.has_network:
            return "no network (one node)"
        if self.measured_network_Bps is not None:
            return f"{Bps_to_gbps(self.measured_network_Bps):.3g} Gb/s measured"
        if self.network_gbps is not None:
            return f"{self.network_gbps:g} Gb/s"
        return str(self.network)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_CLUSTER_KEYS = {f.name for f in dataclasses.fields(Cluster)}
# the settings that are names (or None); ps is 'auto' or a count, checked on its own
_NAMES = ("device", "intra_node", "network", "architecture", "ps_placement", "ps_network",
          "ps_partition", "host_link", "grad_dtype", "precision", "platform")
_SAME_LINK = (("network", "network_gbps"), ("ps_network", "ps_network_gbps"),
              ("intra_node", "intra_node_gbps"), ("host_link", "host_link_gbps"))


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
        for a, b in _SAME_LINK:
            if a in values and b in values:
                raise UsageError(f"{where}: {a} = {values[a]!r} and {b} = {values[b]!r} "
                                 f"describe the same link: keep one")
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        if k not in _CLUSTER_KEYS:
            raise UsageError(f"unknown cluster setting {k!r}")
        values[k] = v
        # A name and a rate for the same link: the one given last (the command line) wins.
        for a, b in _SAME_LINK:
            if k == a:
                values.pop(b, None)
            elif k == b:
                values.pop(a, None)
    return Cluster(**values)

