"""The local launcher: one process per rank on this machine, watched until the job ends.

Each rank is ``python -m scalelab.runner.entry CONFIG.json`` with torchrun's environment
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and ``SCALELAB_THREADS``, started
in its own session with a parent-death signal, optionally behind a command prefix (``ip
netns exec NS`` on an emulated network) and with extra environment per rank; with
``Job.warm`` (the runs on the CPU) forked from a warm interpreter
(:mod:`scalelab.runner.warmstart`) rather than started as a new one. The launcher
talks to ranks only through files in the job folder.

When a rank exits with an error, dies, or the job stops making progress, every other rank is
terminated (SIGTERM, then SIGKILL) and reaped, and the failure is raised naming the rank that
caused it: a rank that raised or died is preferred over ranks that only lost their peer;
when all failures are lost peers, the ranks still running are the ones that hung.

A rank marks its part done (``done-<rank>`` in the job folder) once every rank has passed
the final barrier, after rank 0 has written the result. A rank that dies by a signal after
that (a native abort while its process group and interpreter are torn down) has lost
nothing: the job ends normally and the death is kept in :attr:`Job.teardown` as a warning.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from scalelab.errors import RunFailure, UsageError
from scalelab.runner import warmstart


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def leave(code: int) -> None:
    """End a process that has been a rank, once its process group is destroyed: flush its
    output and exit with ``os._exit``, skipping the interpreter's finalization. There a Gloo
    rank can abort with 'terminate called without an active exception' after its result is
    written (4 of 160 DDP step-timing processes under load, their main thread past its last
    Python frame; 0 of 320 leaving this way)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


#: OpenMP's wait for every process that trains or times training on the CPU, unless the
#: environment sets a wait policy or spin count of its own: a thread at a barrier spins
#: 3,000 times, then sleeps. GNU OpenMP (PyTorch's) spins 300,000 times by default, and a
#: team as wide as the machine then collapses as soon as anything else wants a core: a
#: spinning thread holds the core its late partner needs. resnet18 at 3x64x64, batch 32, two
#: threads on the two cores here, alternated runs of one session (s per step):
#:
#: ================================  =============  =============  ===========
#: two busy loops beside it?         default spin   PASSIVE (0)    3,000 spins
#: ================================  =============  =============  ===========
#: no                                0.182-0.191    0.202-0.213    0.185-0.189
#: yes                               0.95-6.80      0.37-0.85      0.46-0.50
#: ================================  =============  =============  ===========
#:
#: A short spin keeps the quiet machine's speed (passive threads lose about 10% waking up)
#: and hands the core over under contention.
OMP_ENV = {"GOMP_SPINCOUNT": "3000"}
_OMP_OWN = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def training_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default this process's environment) with :data:`OMP_ENV` unless it already
    says how OpenMP threads wait."""
    env = dict(os.environ if base is None else base)
    if not any(key in env for key in _OMP_OWN):
        env.update(OMP_ENV)
    return env


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclass
class RankSpec:
    rank: int
    name: str  # e.g. "rank 1 (worker 1)"
    prefix: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Job:
    workdir: Path
    config_path: Path
    ranks: list[RankSpec]
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    timeout_s: float = 60.0
    progress_rank: int = 0
    warm: bool = False  # ranks forked from a warm interpreter (scalelab.runner.warmstart)
    module: str = "scalelab.runner.entry"  # each rank's ``python -m`` module (the tensor- and
    # pipeline-parallel runs': scalelab.runner.parallel_train)
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    teardown: list[str] = field(default_factory=list)  # deaths after a rank's part was done

    def start(self) -> None:
        world = len(self.ranks)
        port = self.master_port or free_port()
        for r in self.ranks:
            env = {**training_environment(), "RANK": str(r.rank), "WORLD_SIZE": str(world),
                   "LOCAL_RANK": str(r.rank), "LOCAL_WORLD_SIZE": str(world),
                   "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(port),
                   "PYTHONUNBUFFERED": "1", **r.env}
            log = open(self.workdir / f"rank-{r.rank}.log", "wb")  # noqa: SIM115
            cmd = [*r.prefix, sys.executable, "-m", self.module,
                   str(self.config_path)]
            try:
                self.procs[r.rank] = warmstart.popen(
                    cmd, env=env, warm=self.warm, die_with_parent=True, stdout=log,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                self.stop()
                raise RunFailure(f"cannot start {r.name}: {e}") from None
            finally:
                log.close()

    def run(self, on_line=None, network=None, ranks_path=None) -> dict:
        """Start, wait (``on_line`` gets the watched rank's step lines) and return rank 0's
        result (``result.json``), with the deaths after a rank's part was done as
        warnings, an emulated ``network``'s rate and hosts, and every rank's step lines
        written to ``ranks_path`` when given."""
        self.start()
        self.wait(on_line=on_line)
        try:
            result = json.loads((self.workdir / "result.json").read_text())
        except (OSError, ValueError):
            raise RunFailure("the job ended without a result from rank 0") from None
        if self.teardown:
            result["warnings"] = [*result.get("warnings", []), *self.teardown]
        if network is not None:
            result["network"] = {"rate_bps": network.rate_bps, "hosts": len(network.hosts)}
        if ranks_path:
            write_ranks(ranks_path, self.workdir, len(self.ranks))
        return result

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def stop(self, grace_s: float = 2.0) -> None:
        """Terminate every rank still running, then kill and reap."""
        alive = [p for p in self.procs.values() if p.poll() is None]
        for p in alive:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in alive:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs.values():
            if p.poll() is None:
                _signal_group(p, signal.SIGKILL)
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def _code(self, rank: int) -> int | None:
        """The rank's exit code; 0 for one killed by a signal after it marked its part done."""
        code = self.procs[rank].poll()
        if code is not None and code < 0 and (self.workdir / f"done-{rank}").exists():
            return 0
        return code

    def _error(self, rank: int) -> dict | None:
        f = self.workdir / f"error-{rank}.json"
        try:
            return json.loads(f.read_text())
        except (OSError, ValueError):
            return None

    def _log_tail(self, rank: int) -> str:
        try:
            lines = (self.workdir / f"rank-{rank}.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        lines = [ln.strip() for ln in lines if ln.strip()]
        return lines[-1][:300] if lines else ""

    def _progress_size(self) -> int:
        total = 0
        for r in self.ranks:
            try:
                total += (self.workdir / f"rank-{r.rank}.jsonl").stat().st_size
            except OSError:
                pass
        return total

    def wait(self, on_line=None, poll_s: float = 0.25) -> None:
        """Wait for every rank; on any failure stop them all and raise.

        Every ``poll_s`` this process wakes on a core the ranks use: at 0.05 s one all-reduce
        worker on the two cores here kept 0.878 of the bare loop's samples/s, at 0.25 s
        1.041 (resnet18 3x64x64 b=32, three alternations each, load 1.3-1.5,
        ``benchmarks/runner_overhead.py``); a failure is still seen within a quarter second.
        """
        name = {r.rank: r.name for r in self.ranks}
        tail = _Tail(self.workdir / f"rank-{self.progress_rank}.jsonl")
        last_size, last_change = -1, time.monotonic()
        stall_s = 2 * self.timeout_s + 30
        try:
            while True:
                if on_line is not None:
                    for rec in tail.read():
                        on_line(rec)
                codes = {r: self._code(r) for r in self.procs}
                failed = {r: c for r, c in codes.items() if c not in (None, 0)}
                if failed:
                    self._fail(failed, name)
                if all(c == 0 for c in codes.values()):
                    self.teardown = [
                        f"{name[r]} {self._describe(r, p.returncode)} after its part was done, "
                        "while closing its connections: nothing was lost"
                        for r, p in self.procs.items() if p.returncode < 0]
                    if on_line is not None:
                        for rec in tail.read():
                            on_line(rec)
                    return
                size = self._progress_size()
                now = time.monotonic()
                if size != last_size:
                    last_size, last_change = size, now
                elif now - last_change > stall_s:
                    running = [name[r] for r, c in codes.items() if c is None]
                    self.stop()
                    raise RunFailure(
                        f"the job made no progress for {stall_s:g} s; still running: "
                        f"{', '.join(running)}")
                time.sleep(poll_s)
        except BaseException:
            self.stop()
            raise

    def _fail(self, failed: dict[int, int], name: dict[int, str]) -> None:
        # Ranks that only lost a peer fail within their own wait's timeout: give them that
        # long to surface, so that a rank which raised or died is found, and the ranks still
        # running afterwards are the ones that hung.
        deadline = time.monotonic() + min(self.timeout_s, 5.0) + 0.5
        while time.monotonic() < deadline:
            if any(self._kind(r, c) != "comm" for r, c in failed.items()):
                break
            if all(p.poll() is not None for p in self.procs.values()):
                break
            time.sleep(0.05)
            failed.update({r: c for r in self.procs if (c := self._code(r)) not in (None, 0)})
        # several ranks still running and everyone who failed only lost a peer: the others
        # time out in turn until the ones left running are the ones that hang
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            running = [r for r, p in self.procs.items() if p.poll() is None]
            failed.update({r: c for r in self.procs if (c := self._code(r)) not in (None, 0)})
            if len(running) <= 1 or any(self._kind(r, c) != "comm" for r, c in failed.items()):
                break
            time.sleep(0.05)
        running = [r for r, p in self.procs.items() if p.poll() is None]
        self.stop()
        causes = sorted(failed, key=lambda r: (self._kind(r, failed[r]) == "comm",
                                               self._time(r), r))
        first = causes[0]
        kind = self._kind(first, failed[first])
        if kind == "comm" and running:
            hung = ", ".join(name[r] for r in running)
            raise RunFailure(
                f"{hung} stopped responding; {name[first]}: {self._describe(first, failed[first])}")
        message = f"{name[first]} failed: {self._describe(first, failed[first])}"
        if kind == "usage":
            err = self._error(first)
            raise UsageError(err["error"] if err else message)
        raise RunFailure(message)

    def _kind(self, rank: int, code: int) -> str:
        if code is not None and code < 0:
            return "signal"
        err = self._error(rank)
        return err["kind"] if err else "local"

    def _time(self, rank: int) -> float:
        err = self._error(rank)
        return err["time"] if err else 0.0

    def _describe(self, rank: int, code: int) -> str:
        if code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
            tail = self._log_tail(rank) if sig != "SIGKILL" else ""
            return f"died (killed by {sig})" + (f": {tail}" if tail else "")
        err = self._error(rank)
        if err:
            return err["error"]
        return f"exited with code {code}" + (f": {t}" if (t := self._log_tail(rank)) else "")


def write_ranks(path, workdir: Path, world_size: int) -> None:
    """Every rank's step lines (``rank-R.jsonl`` of ``workdir``), rank by rank, to ``path``."""
    from scalelab.results import write_text_atomic

    lines = [f.read_text() for r in range(world_size)
             if (f := workdir / f"rank-{r}.jsonl").exists()]
    write_text_atomic(path, "".join(lines))


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            p.send_signal(sig)
        except ProcessLookupError:
            pass


class _Tail:
    """New complete JSON lines of a growing file."""

    def __init__(self, path: Path):
        self.path, self.pos, self.buf = path, 0, b""

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                chunk = f.read()
        except OSError:
            return []
        self.pos += len(chunk)
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for ln in lines:
            try:
                out.append(json.loads(ln))
            except ValueError:
                pass
        return out
