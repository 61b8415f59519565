"""Every byte of a parameter-server exchange charged to the link it crosses.

A cluster is ``n`` nodes of ``g`` devices. Inside a node each device reaches the host over
its own host link (PCIe; ``h`` devices may share one switch uplink), devices reach each
other over the device link (NVLink, PCIe), and the node reaches other nodes over its NICs
(``nics = ceil(g / gpus_per_nic)`` of them, used together: bandwidth ``B_node = nics x
B_nic`` per direction). Dedicated servers sit on other machines behind their own NICs.

Senders: with local aggregation a node first reduces its devices' gradients over the device
link and one device sends the node's sum (``s = 1`` sender per node); without it every
device sends (``s = g``). ``N_w = n s`` senders in all, each pushing ``S_p`` and pulling
``S_p`` back per step.

Servers hold fractions ``f_k`` of the parameters. Colocated servers run on the nodes' CPUs
(TensorFlow's ``local_parameter_device=cpu``, BytePS's local server): node ``j`` holds
``F_j`` of the parameters (the sum of its servers' fractions). A sender's bytes for its own
node's server cross only its host link; bytes for other nodes cross its node's NIC.
Any number ``k`` of servers can be colocated on ``n`` nodes (:func:`servers_per_node`):
``floor(k/n)`` on every node and one more on the first ``k mod n``, so with ``k < n`` the
first ``k`` nodes host one each and the others none (``F_j = 0``). A node that hosts a
server carries its own senders' traffic and its server's on the same NIC; the busiest NIC
(the largest ``F_j`` inbound, the smallest outbound) sets the phase.

Per phase (push; pull is the mirror image), per direction, on the busiest instance:

- host link:   ``h' S_p`` with ``h' = min(h, s)`` senders sharing it
  (every byte a device sends leaves over its host link, to the host server or to the NIC);
- node NIC out, colocated: ``s S_p (1 - F_min)``;  in: ``(N_w - s) S_p F_max``;
- node NIC out, dedicated: ``s S_p``;
- dedicated server NIC in: ``N_w S_p f_max``.

A phase lasts as long as its busiest link (``bytes / bandwidth``) plus one message latency
(the phase's messages are in flight together). Push-then-pull runs the two phases one after
the other: ``T = 2 x phase``. Pipelined (full-duplex) runs them at once in opposite
directions, so each direction of a NIC carries its push traffic plus its pull replies:
colocated ``s S_p (1 - F_j) + (N_w - s) S_p F_j`` out of node ``j``, largest at ``F_max``
or ``F_min`` (it is linear in ``F_j``); ``T = phase``.

With one device per node (``g = 1``, an unshared link) these reduce to
:func:`scalelab.theory.comm.ps_exchange`'s forms; with one node and colocated servers no
byte touches the NIC and only the host links count, which is why a single 8-GPU machine
with its parameter server on the host CPU scales almost linearly where a model charging
the NIC would predict a collapse.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

HOST_LINK = "host-link"
NIC_OUT = "network-worker"
NIC_IN = "network-server"


class LinkLoad(NamedTuple):
    """Bytes one phase puts on the busiest instance of a link, and how long they take."""

    link: str
    """host-link | network-worker (a node's NICs, outbound) | network-server (inbound)."""
    bytes: float
    """Bytes per phase per direction."""
    bandwidth_Bps: float
    """Per-direction bandwidth of that link instance."""

    @property
    def seconds(self) -> float:
        return self.bytes / self.bandwidth_Bps if self.bytes > 0 else 0.0


@dataclass(frozen=True)
class PsTopology:
    """Where the senders and servers are."""

    nodes: int
    """n: machines with devices."""
    senders_per_node: int
    """s: 1 with local aggregation, else the node's devices."""
    node_nic_Bps: float
    """B_node: a node's NICs together, per direction."""
    host_link_Bps: float | None = None
    """One host link (PCIe) per direction; None: not modelled (infinitely fast)."""
    senders_per_host_link: int = 1
    """h: senders sharing one host link (a PCIe switch uplink)."""
    colocated: bool = False
    """Servers on the nodes' CPUs (else on dedicated machines)."""
    server_nic_Bps: float | None = None
    """A dedicated server's NIC per direction (dedicated only)."""

    def __post_init__(self):
        if self.nodes < 1 or self.senders_per_node < 1 or self.senders_per_host_link < 1:
            raise ValueError(f"nodes, senders per node and per host link must be >= 1, got "
                             f"{self.nodes}, {self.senders_per_node}, "
                             f"{self.senders_per_host_link}")
        if not self.node_nic_Bps > 0:
            raise ValueError(f"node NIC bandwidth must be > 0, got {self.node_nic_Bps}")
        if self.host_link_Bps is not None and not self.host_link_Bps > 0:
            raise ValueError(f"host link bandwidth must be > 0, got {self.host_link_Bps}")
        if not self.colocated and not (self.server_nic_Bps or 0) > 0:
            raise ValueError(f"dedicated servers need their NIC bandwidth > 0, got "
                             f"{self.server_nic_Bps}")

    @property
    def senders(self) -> int:
        return self.nodes * self.senders_per_node


def ps_phase_loads(param_bytes: float, topo: PsTopology, largest_fraction: float,
                   smallest_fraction: float, full_duplex: bool = False) -> tuple[LinkLoad, ...]:
    """Per-direction loads of one phase on each link (see the module's derivation).

    Colocated: ``largest_fraction``/``smallest_fraction`` are the per-node fractions
    ``F_max``, ``F_min``; dedicated: the largest server's ``f_max`` (the smallest is unused).
    """
    if not 0 < largest_fraction <= 1 or not 0 <= smallest_fraction <= largest_fraction:
        raise ValueError(f"shard fractions must satisfy 0 <= f_min <= f_max <= 1, got "
                         f"{smallest_fraction}, {largest_fraction}")
    s_p, s, n_w = float(param_bytes), topo.senders_per_node, topo.senders
    loads = []
    if topo.host_link_Bps is not None:
        shared = min(topo.senders_per_host_link, s)
        loads.append(LinkLoad(HOST_LINK, shared * s_p, topo.host_link_Bps))
    if topo.colocated:
        if topo.nodes > 1:
            out = s * s_p * (1.0 - smallest_fraction)
            inbound = (n_w - s) * s_p * largest_fraction
            if full_duplex:
                out = max(s * s_p * (1.0 - f) + (n_w - s) * s_p * f
                          for f in (smallest_fraction, largest_fraction))
            loads.append(LinkLoad(NIC_OUT, out, topo.node_nic_Bps))
            loads.append(LinkLoad(NIC_IN, inbound, topo.node_nic_Bps))
    else:
        loads.append(LinkLoad(NIC_OUT, s * s_p, topo.node_nic_Bps))
        loads.append(LinkLoad(NIC_IN, n_w * s_p * largest_fraction, topo.server_nic_Bps))
    return tuple(loads)


def busiest(loads: tuple[LinkLoad, ...]) -> LinkLoad | None:
    """The load that takes longest (None when nothing crosses any link)."""
    moving = [x for x in loads if x.bytes > 0]
    return max(moving, key=lambda x: x.seconds) if moving else None


def phase_s(loads: tuple[LinkLoad, ...], latency_s: float = 0.0,
            top: LinkLoad | None = None) -> float:
    """A phase lasts as long as its busiest link, plus one latency (zero if nothing moves);
    ``top`` is :func:`busiest` of ``loads`` when the caller has it already."""
    top = busiest(loads) if top is None else top
    return 0.0 if top is None else top.seconds + latency_s


class PhaseTime(NamedTuple):
    """One phase of a parameter-server exchange: how long, and which link sets it."""

    seconds: float
    """:func:`phase_s`: the busiest link's time plus one latency (0 if nothing moves)."""
    link: str | None
    """That link (None when nothing crosses any link)."""


@lru_cache(maxsize=1024)
def ps_phase(param_bytes: float, nodes: int, senders_per_node: int, node_nic_Bps: float,
             host_link_Bps: float | None, senders_per_host_link: int, colocated: bool,
             server_nic_Bps: float | None, largest_fraction: float, smallest_fraction: float,
             full_duplex: bool, latency_s: float) -> PhaseTime:
    """:func:`phase_s` and :func:`busiest` link of :func:`ps_phase_loads` on a
    :class:`PsTopology` of these fields; memoized (a sweep asks for the same machines and
    servers at every device count of a node). Invalid fields raise as they do there."""
    topo = PsTopology(nodes, senders_per_node, node_nic_Bps, host_link_Bps,
                      senders_per_host_link, colocated, server_nic_Bps)
    loads = ps_phase_loads(param_bytes, topo, largest_fraction, smallest_fraction, full_duplex)
    top = busiest(loads)
    return PhaseTime(phase_s(loads, latency_s, top), None if top is None else top.link)


def nics_per_node(gpus_per_node: int, gpus_per_nic: int) -> int:
    """NICs a node has when ``gpus_per_nic`` devices share one: ceil(g / gpus_per_nic)."""
    if gpus_per_node < 1 or gpus_per_nic < 1:
        raise ValueError(f"devices per node and per NIC must be >= 1, got {gpus_per_node}, "
                         f"{gpus_per_nic}")
    return -(-gpus_per_node // gpus_per_nic)


def servers_per_node(num_ps: int, nodes: int) -> tuple[int, ...]:
    """Where ``num_ps`` colocated servers run on ``nodes`` nodes: ``floor(k/n)`` on every
    node and one more on the first ``k mod n`` (6 on 8: one each on nodes 0-5; 12 on 8: two
    on nodes 0-3, one on 4-7). Shards stay balanced across the servers, so a node's share of
    the parameters is its count over ``k``."""
    if num_ps < 1 or nodes < 1:
        raise ValueError(f"servers and nodes must be >= 1, got {num_ps}, {nodes}")
    base, extra = divmod(num_ps, nodes)
    return tuple(base + (1 if j < extra else 0) for j in range(nodes))


def colocated_node_fractions(num_ps: int, nodes: int, largest_fraction: float,
                             smallest_fraction: float) -> tuple[float, float]:
    """``(F_max, F_min)``: the largest and smallest share of the parameters one node's
    servers hold, from the servers' largest and smallest shard ``f_max``, ``f_min``.

    The busiest node hosts ``c_max = ceil(k/n)`` servers, the idlest ``c_min = floor(k/n)``
    (0 when ``k < n``): ``F_max = min(1, c_max f_max)`` and ``F_min = c_min f_min`` (exact
    for even chunks, where every ``f`` is ``1/k``; bounds for whole tensors)."""
    per = servers_per_node(num_ps, nodes)
    return min(1.0, max(per) * largest_fraction), min(per) * smallest_fraction
