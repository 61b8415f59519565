"""Emulated clusters on one Linux machine: network namespaces, veth pairs and ``tc tbf``.

Each emulated host is a network namespace with one interface, ``eth0``, addressed from the
benchmarking range 198.18.0.0/24. Every host's veth peer sits in a switch namespace and is
enslaved to a bridge there, so hosts reach each other only through the bridge:

    host i (198.18.0.<i+1>, eth0) ==veth== p<i> in the switch namespace -- br0

The link of every host is shaped to RATE in both directions by a token-bucket filter on each
end's egress: ``eth0`` shapes host -> switch, ``p<i>`` shapes switch -> host. A transfer
between two hosts therefore crosses two shaped queues of the same rate and runs at RATE.

Token-bucket parameters (``tc-tbf(8)``): the bucket must hold at least one packet as the
kernel hands it to the qdisc, and veth passes GSO super-packets of up to 64 KiB, so the
burst is ``max(64 KiB, 4 ms at RATE)``; the queue holds ``max(2 bursts, 50 ms at RATE)`` so
a TCP flow keeps the link busy without long queueing delay.

Everything created carries the launcher's process id in its name (``slnet<pid>x<n>-...``).
It is removed when the context manager exits, by any path (return, exception, Ctrl-C,
SIGTERM), and what a crashed launcher left behind (its process no longer alive) is removed
at the next start. Needs root and ``ip``/``tc`` from iproute2.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from scalelab.errors import RunFailure, UsageError

PREFIX = "slnet"
SUBNET = "198.18.0"
MIN_RATE_BPS = 64_000
MAX_RATE_BPS = 10_000_000_000
_counter = itertools.count()

_UNITS = {"": 1, "bit": 1, "k": 1e3, "kbit": 1e3, "kbps": 1e3, "m": 1e6, "mbit": 1e6,
          "mbps": 1e6, "g": 1e9, "gbit": 1e9, "gbps": 1e9}


def parse_rate(text: str | int | float) -> int:
    """A link rate in bits/s: '200mbit', '1gbit', '500kbit', '100mbps' (megabits), 1e9.

    'bps' here means bits per second, as people say it (tc itself reads 'bps' as bytes).
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise UsageError(f"not a rate: {text!r} (examples: 100mbit, 1gbit, 500kbit)")
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not MIN_RATE_BPS <= value <= MAX_RATE_BPS:
        raise UsageError(
            f"rate {text!r} cannot be shaped here: the emulation shapes "
            f"{MIN_RATE_BPS / 1e3:.0f} kbit/s to {MAX_RATE_BPS / 1e9:.0f} gbit/s"
        )
    return int(value)


def format_rate(rate_bps: float) -> str:
    for unit, size in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if rate_bps >= size:
            return f"{rate_bps / size:g}{unit}"
    return f"{rate_bps:g}bit"


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RunFailure(f"netem: `{' '.join(cmd)}` failed: {proc.stderr.strip()}")
    return proc


def check_available() -> None:
    """Raise UsageError unless this process can create network namespaces."""
    why = None
    if not sys.platform.startswith("linux"):
        why = "this is not Linux"
    elif os.geteuid() != 0:
        why = "not running as root"
    elif shutil.which("ip") is None or shutil.which("tc") is None:
        why = "iproute2 (ip, tc) is not installed"
    else:
        probe = f"{PREFIX}{os.getpid()}probe"
        proc = _run("ip", "netns", "add", probe, check=False)
        if proc.returncode != 0:
            why = f"ip netns add failed: {proc.stderr.strip()}"
        else:
            _run("ip", "netns", "del", probe, check=False)
    if why:
        raise UsageError(f"emulated networks need root and network namespaces (ip netns): {why}")


@dataclass(frozen=True)
class Host:
    netns: str
    ip: str
    ifname: str


@dataclass
class EmulatedNetwork:
    hosts: list[Host]
    rate_bps: int
    switch_netns: str
    tag: str
    namespaces: list[str] = field(default_factory=list)

    def exec_prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[i].netns]


def _owner_pid(name: str) -> int | None:
    m = re.match(rf"{PREFIX}(\d+)(x\d+|probe)", name)
    return int(m.group(1)) if m else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_namespaces() -> list[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def cleanup_stale() -> list[str]:
    """Remove namespaces and root-namespace veths left by launchers that are gone."""
    removed = []
    for ns in list_namespaces():
        pid = _owner_pid(ns)
        if pid is not None and not _alive(pid):
            _run("ip", "netns", "del", ns, check=False)
            removed.append(ns)
    links = _run("ip", "-o", "link", "show", check=False).stdout
    for m in re.finditer(r"^\d+:\s+(slv(\d+)x\d+\w*?)[@:]", links, re.M):
        if not _alive(int(m.group(2))):
            _run("ip", "link", "del", m.group(1), check=False)
            removed.append(m.group(1))
    return removed


def _tbf(ns: str, dev: str, rate_bps: int) -> None:
    rate_Bps = rate_bps / 8
    burst = int(max(64 * 1024, rate_Bps * 0.004))
    limit = int(max(2 * burst, rate_Bps * 0.050))
    _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
         "rate", f"{rate_bps}bit", "burst", str(burst), "limit", str(limit))


def _create(num_hosts: int, rate_bps: int, tag: str, net: EmulatedNetwork) -> None:
    sw = net.switch_netns
    _run("ip", "netns", "add", sw)
    net.namespaces.append(sw)
    _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
    _run("ip", "-n", sw, "link", "set", "br0", "up")
    short = tag[len(PREFIX):]
    for i in range(num_hosts):
        ns = f"{tag}-h{i}"
        _run("ip", "netns", "add", ns)
        net.namespaces.append(ns)
        a, b = f"slv{short}h{i}", f"slv{short}s{i}"
        _run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        _run("ip", "link", "set", a, "netns", ns)
        _run("ip", "link", "set", b, "netns", sw)
        _run("ip", "-n", ns, "link", "set", a, "name", "eth0")
        _run("ip", "-n", sw, "link", "set", b, "name", f"p{i}")
        _run("ip", "-n", sw, "link", "set", f"p{i}", "master", "br0")
        _run("ip", "-n", sw, "link", "set", f"p{i}", "up")
        ip = f"{SUBNET}.{i + 1}"
        _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _tbf(ns, "eth0", rate_bps)
        _tbf(sw, f"p{i}", rate_bps)
        net.hosts.append(Host(netns=ns, ip=ip, ifname="eth0"))


def _destroy(net: EmulatedNetwork) -> None:
    for ns in reversed(net.namespaces):
        _run("ip", "netns", "del", ns, check=False)
    short = net.tag[len(PREFIX):]
    links = _run("ip", "-o", "link", "show", check=False).stdout
    for m in re.finditer(rf"^\d+:\s+(slv{short}\w+?)[@:]", links, re.M):
        _run("ip", "link", "del", m.group(1), check=False)


@contextlib.contextmanager
def emulated_network(num_hosts: int, rate: str | int) -> Iterator[EmulatedNetwork]:
    """Create ``num_hosts`` hosts on a bridge, each link shaped to ``rate``; remove on exit."""
    rate_bps = parse_rate(rate)
    if not 1 <= num_hosts <= 250:
        raise UsageError(f"an emulated network has 1 to 250 hosts, not {num_hosts}")
    check_available()
    cleanup_stale()
    tag = f"{PREFIX}{os.getpid()}x{next(_counter)}"
    net = EmulatedNetwork(hosts=[], rate_bps=rate_bps, switch_netns=f"{tag}-sw", tag=tag)
    previous = None
    if threading.current_thread() is threading.main_thread():
        def _on_term(signum, frame):
            raise SystemExit(128 + signum)
        previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        _create(num_hosts, rate_bps, tag, net)
        yield net
    finally:
        _destroy(net)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


# ----------------------------------------------------------------------------- link probe

def _probe_server(ip: str, port: int, pings: int) -> None:
    """Run inside a host namespace: answer pings, then count the bytes of one stream."""
    srv = socket.create_server((ip, port))
    srv.settimeout(30)
    conn, _ = srv.accept()
    conn.settimeout(30)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(pings):
        conn.sendall(conn.recv(1))
    total, first, last = 0, None, None
    while True:
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        now = time.perf_counter()
        if first is None:
            first = now
            total_at_first = len(chunk)
        total += len(chunk)
        last = now
    result = {"bytes": total - total_at_first, "seconds": (last - first) if first else 0.0}
    print(json.dumps(result), flush=True)


def _probe_client(ip: str, port: int, pings: int, seconds: float) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((ip, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(pings):
        t0 = time.perf_counter()
        conn.sendall(b"x")
        conn.recv(1)
        rtts.append(time.perf_counter() - t0)
    payload = b"\0" * (1 << 16)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        conn.sendall(payload)
    conn.close()
    print(json.dumps({"rtt_s": statistics.median(rtts)}), flush=True)


def measure_link(net: EmulatedNetwork, seconds: float = 1.0, pings: int = 20) -> dict:
    """Measure bandwidth (one bounded TCP stream) and latency (ping-pong) host 0 -> host 1.

    ``latency_s`` is half the median round trip of one-byte messages.
    """
    if len(net.hosts) < 2:
        raise UsageError("measuring a link needs at least two emulated hosts")
    out = _probe(net.exec_prefix(0), net.exec_prefix(1), net.hosts[1].ip, seconds, pings,
                 f"{net.hosts[0].ip} -> {net.hosts[1].ip}")
    return {"rate_bps": net.rate_bps, **out}


def measure_loopback(seconds: float = 1.0, pings: int = 20) -> dict:
    """The same probe between two processes over 127.0.0.1 (no emulated network)."""
    return {"rate_bps": None, **_probe([], [], "127.0.0.1", seconds, pings, "loopback")}


def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def _probe(client_prefix: list[str], server_prefix: list[str], ip: str, seconds: float,
           pings: int, what: str) -> dict:
    if not 0 < seconds <= 60 or not 1 <= pings <= 10_000:
        raise UsageError(f"link probe: seconds in (0, 60] and pings in [1, 10000], got "
                         f"{seconds}, {pings}")
    port = _free_port("127.0.0.1") if not server_prefix else 29400
    py = [sys.executable, "-m", "scalelab.netem"]
    server = subprocess.Popen(server_prefix + py + ["--serve", ip, str(port), str(pings)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = subprocess.run(client_prefix + py + ["--send", ip, str(port), str(pings),
                                                      str(seconds)],
                                capture_output=True, text=True, timeout=seconds + 30)
        out, err = server.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        raise RunFailure(f"netem: link probe {what} did not finish in time") from None
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    if client.returncode != 0 or server.returncode != 0:
        raise RunFailure(f"netem: link probe {what} failed: "
                         f"{(client.stderr or err).strip().splitlines()[-1:]}")
    stream = json.loads(out.strip().splitlines()[-1])
    ping = json.loads(client.stdout.strip().splitlines()[-1])
    bandwidth = stream["bytes"] / stream["seconds"] if stream["seconds"] > 0 else 0.0
    return {"bandwidth_Bps": bandwidth, "latency_s": ping["rtt_s"] / 2,
            "probe_seconds": seconds}


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "--serve":
        _probe_server(argv[1], int(argv[2]), int(argv[3]))
        return 0
    if argv and argv[0] == "--send":
        _probe_client(argv[1], int(argv[2]), int(argv[3]), float(argv[4]))
        return 0
    print("usage: python -m scalelab.netem --serve IP PORT PINGS | --send IP PORT PINGS SECONDS",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
