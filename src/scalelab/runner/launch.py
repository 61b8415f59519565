"""The local launcher: one process per rank on 127.0.0.1 (or inside emulated hosts).

Every rank is ``[prefix...] python -m scalelab.runner.entry CONFIG.json`` with torchrun's
environment variables set (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) plus any per-rank variables. Children die with the launcher (PR_SET_PDEATHSIG).
When a rank fails, every other rank is stopped at once (SIGTERM, then SIGKILL), and the
failure is reported as one line naming the rank that caused it: a rank that failed on its
own, or, when ranks timed out waiting, the peer they were waiting for.
"""

from __future__ import annotations

import ctypes
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

_PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


@dataclass
class RankSpec:
    rank: int
    prefix: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def stop_all(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                p.terminate()
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _blame(config, log_dir: Path, codes: dict[int, int]) -> tuple[str, int]:
    errors = {}
    for r in range(config.world_size):
        f = log_dir / f"rank-{r}.error.json"
        if f.exists():
            try:
                errors[r] = json.loads(f.read_text())
            except (OSError, json.JSONDecodeError):
                pass
    if any(e.get("usage") for e in errors.values()):
        e = next(e for e in errors.values() if e.get("usage"))
        return e["error"], 2
    # A rank that failed on its own (no peer named, or died without a word) is the cause.
    own = [r for r, e in errors.items() if e.get("peer") is None]
    silent = [r for r, c in codes.items() if c not in (0, None) and r not in errors
              and c != -signal.SIGTERM and c != -signal.SIGKILL]
    if own:
        r = own[0]
        return f"{config.describe_rank(r)} failed: {errors[r]['error']}", 1
    if silent:
        r = silent[0]
        why = _last_line(log_dir / f"rank-{r}.log")
        return (f"{config.describe_rank(r)} exited with code {codes[r]}"
                + (f": {why}" if why else "")), 1
    # Everyone who failed was waiting for someone: follow the chain to a rank that didn't fail.
    if errors:
        r = min(errors)
        seen = set()
        while r in errors and errors[r].get("peer") not in (None, -1) and r not in seen:
            seen.add(r)
            nxt = errors[r]["peer"]
            if nxt not in errors:
                return (f"{config.describe_rank(nxt)} stopped responding: "
                        f"{config.describe_rank(r)} {errors[r]['error']}"), 1
            r = nxt
        return f"{config.describe_rank(r)} failed: {errors[r]['error']}", 1
    return "a rank failed without a message", 1


def launch_local(config, log_dir: Path, ranks: list[RankSpec], master_addr: str = "127.0.0.1",
                 progress=None) -> dict:
    """Start every rank, watch them, return rank 0's summary or raise RunFailure."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for f in log_dir.glob("rank-*"):
        f.unlink()
    cfg_path = log_dir / "config.json"
    cfg_path.write_text(json.dumps({**config.to_dict(), "log_dir": str(log_dir)}))
    port = free_port() if master_addr == "127.0.0.1" else 29500 + os.getpid() % 20000
    base = dict(os.environ)
    base["PYTHONPATH"] = os.pathsep.join(
        [os.getcwd(), *[p for p in sys.path if p], base.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    world = config.world_size
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        for spec in ranks:
            env = {**base, "RANK": str(spec.rank), "WORLD_SIZE": str(world),
                   "LOCAL_RANK": str(spec.rank), "LOCAL_WORLD_SIZE": str(world),
                   "MASTER_ADDR": master_addr, "MASTER_PORT": str(port),
                   "OMP_NUM_THREADS": str(_threads(config, world)), **spec.env}
            log = open(log_dir / f"rank-{spec.rank}.log", "w")
            logs.append(log)
            cmd = [*spec.prefix, sys.executable, "-m", "scalelab.runner.entry", str(cfg_path)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent))
        _watch(config, log_dir, procs, progress)
    finally:
        stop_all(procs)
        for log in logs:
            log.close()
    try:
        return json.loads((log_dir / "result.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise RunFailure(f"rank 0 wrote no result: {e}") from None


def _threads(config, world: int) -> int:
    if config.threads:
        return config.threads
    return max(1, (os.cpu_count() or 1) // world)


def _watch(config, log_dir: Path, procs, progress) -> None:
    log0 = log_dir / "rank-0.jsonl"
    pos = 0
    total = config.steps - config.start_step
    done = 0
    while True:
        codes = {i: p.poll() for i, p in enumerate(procs)}
        if progress is not None and log0.exists():
            with open(log0) as f:
                f.seek(pos)
                chunk = f.read()
            complete = chunk[: chunk.rfind("\n") + 1]
            pos += len(complete.encode())
            for line in complete.splitlines():
                done += 1
                try:
                    progress(done, total, json.loads(line))
                except json.JSONDecodeError:
                    pass
        if any(c not in (None, 0) for c in codes.values()):
            time.sleep(0.5)  # let the other ranks' error files land
            codes = {i: p.poll() for i, p in enumerate(procs)}
            stop_all(procs)
            msg, code = _blame(config, log_dir, codes)
            if code == 2:
                raise UsageError(msg)
            raise RunFailure(msg)
        if all(c == 0 for c in codes.values()):
            return
        time.sleep(0.05)


def torchrun_env() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment; UsageError when it is missing."""
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        raise UsageError(
            "--launcher torchrun needs RANK and WORLD_SIZE (start it with torchrun)"
        ) from None
