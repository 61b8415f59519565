import os
import signal
import subprocess
import sys
import time

import pytest

from scalelab import netem
from scalelab.errors import UsageError

CHILD = """
import sys, time
from scalelab.netem import emulated_network
with emulated_network(2, "100mbit") as net:
    print("ready", flush=True)
    time.sleep(60)
"""


def left_by(pid: int | None = None) -> list[str]:
    """Namespaces and root-namespace veths that process ``pid`` (default: this one) created.

    Scoped by the owner's pid in the names, so concurrent test runs do not see each other.
    """
    pid = os.getpid() if pid is None else pid
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return ([n for n in netem.list_namespaces() if n.startswith(f"{netem.PREFIX}{pid}x")]
            + [ln for ln in links.splitlines() if f"slv{pid}x" in ln])


def ours() -> list[str]:
    return left_by()


def test_parse_rate():
    assert netem.parse_rate("200mbit") == 200_000_000
    assert netem.parse_rate("1gbit") == 1_000_000_000
    assert netem.parse_rate("500kbit") == 500_000
    assert netem.parse_rate("100mbps") == 100_000_000
    for bad in ["fast", "10tbit", "1kbit", "0mbit", "-5mbit", "100gbit"]:
        with pytest.raises(UsageError):
            netem.parse_rate(bad)


@pytest.mark.netem
@pytest.mark.parametrize("rate", ["100mbit", "500mbit"])
def test_shaped_link_measures_its_rate(rate):
    with netem.emulated_network(2, rate) as net:
        link = netem.measure_link(net, seconds=1.0)
        assert len(netem.list_namespaces()) >= 3
    measured_bps = link["bandwidth_Bps"] * 8
    assert abs(measured_bps - netem.parse_rate(rate)) / netem.parse_rate(rate) < 0.10
    assert link["latency_s"] < 0.01
    assert ours() == []


@pytest.mark.netem
def test_nothing_left_after_an_exception():
    with pytest.raises(RuntimeError):
        with netem.emulated_network(3, "1gbit"):
            raise RuntimeError("a rank failed")
    assert ours() == []


def default_sigint() -> None:
    """In a child: SIGINT as at an interactive shell (a background job inherits it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_child():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             preexec_fn=default_sigint)
    assert child.stdout.readline().strip() == "ready"
    assert any(n.startswith(f"{netem.PREFIX}{child.pid}x") for n in netem.list_namespaces())
    return child


@pytest.mark.netem
def test_interrupted_run_cleans_up():
    child = _start_child()
    child.send_signal(signal.SIGINT)
    child.wait(timeout=20)
    assert left_by(child.pid) == []


@pytest.mark.netem
def test_killed_launcher_is_cleaned_at_next_start():
    child = _start_child()
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=20)
    left = [n for n in netem.list_namespaces() if n.startswith(f"{netem.PREFIX}{child.pid}x")]
    assert left, "a SIGKILLed launcher cannot clean up after itself"
    with netem.emulated_network(2, "100mbit"):
        assert not [n for n in netem.list_namespaces()
                    if n.startswith(f"{netem.PREFIX}{child.pid}x")]
    assert left_by(child.pid) == []
    assert ours() == []


@pytest.mark.netem
def test_sigterm_cleans_up():
    child = _start_child()
    child.terminate()
    child.wait(timeout=20)
    time.sleep(0.1)
    assert left_by(child.pid) == []
