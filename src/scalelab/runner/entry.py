"""The per-process entry point: ``python -m scalelab.runner.entry CONFIG.json``.

Reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
joins the Gloo job with the run's timeout, runs this rank's role, gathers every rank's
summary on rank 0 and leaves the process group on every exit path. A failure is written to
``rank-<r>.error.json`` in the log folder (one line, and the peer it concerns) and the
process exits 1.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from time import perf_counter

import torch
import torch.distributed as dist

from scalelab.errors import UsageError
from scalelab.results import write_text_atomic
from scalelab.runner.comm import PeerError
from scalelab.runner.config import RunConfig
from scalelab.runner.timers import StepTimer


class RankContext:
    """What a role's loop needs: config, its index, the step timer, the JSON lines log."""

    def __init__(self, config: RunConfig, rank: int, log_dir: str | None, progress=None):
        self.config = config
        self.rank = rank
        self.role, self.index = config.role_of(rank)
        self.timer = StepTimer()
        self.log_dir = Path(log_dir) if log_dir else None
        self._log = None
        if self.log_dir:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_dir / f"rank-{rank}.jsonl", "a", buffering=1)
        self._progress = progress

    def now(self) -> float:
        return perf_counter()

    def step_done(self, **extra) -> dict:
        line = self.timer.finish(**extra)
        if self._log:
            self._log.write(json.dumps({"rank": self.rank, "role": self.role,
                                        "index": self.index, **line}) + "\n")
        return line

    def progress(self, done: int, total: int) -> None:
        if self._progress is not None and self.rank == 0:
            self._progress(done, total)

    def save_tensor(self, path: str, t: torch.Tensor) -> None:
        import io

        buf = io.BytesIO()
        torch.save(t.detach().clone(), buf)
        write_text_atomic(path, buf.getvalue())

    def close(self):
        if self._log:
            self._log.close()
            self._log = None


def threads_for(config: RunConfig, local_world: int) -> int:
    if config.threads:
        return config.threads
    return max(1, (os.cpu_count() or 1) // max(1, local_world))


def rank_main(config: RunConfig, rank: int, world_size: int, log_dir: str | None = None,
              progress=None) -> dict | None:
    """Run one rank; returns the run summary on rank 0, ``None`` elsewhere."""
    from scalelab.runner.allreduce import run_ddp_worker
    from scalelab.runner.ps import run_server, run_worker
    from scalelab.runner.summary import build_run

    if world_size != config.world_size:
        raise UsageError(
            f"world size {world_size} does not match the roles: {config.workers} workers + "
            f"{config.ps} servers = {config.world_size} ranks"
        )
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    torch.set_num_threads(threads_for(config, local_world))
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=config.timeout_s))
    ctx = RankContext(config, rank, log_dir, progress)
    t0 = perf_counter()
    try:
        if config.architecture == "allreduce":
            result = run_ddp_worker(ctx)
        elif ctx.role == "worker":
            result = run_worker(ctx)
        else:
            result = run_server(ctx)
        summary = {"rank": rank, "role": ctx.role, "index": ctx.index,
                   "wall_s": perf_counter() - t0, "threads": torch.get_num_threads(),
                   "steps": ctx.timer.steps, **result}
        gathered = [None] * world_size if rank == 0 else None
        dist.gather_object(summary, gathered, dst=0)
        return build_run(config, gathered) if rank == 0 else None
    finally:
        ctx.close()
        dist.destroy_process_group()


def describe_failure(config: RunConfig, rank: int, e: BaseException) -> dict:
    peer = e.peer if isinstance(e, PeerError) else None
    text = str(e).strip().splitlines()
    msg = text[0] if text else type(e).__name__
    if not isinstance(e, (PeerError, UsageError)):
        msg = f"{type(e).__name__}: {msg}"
    return {"rank": rank, "where": config.describe_rank(rank), "peer": peer, "error": msg,
            "usage": isinstance(e, UsageError)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cfg_path = Path(argv[0])
    d = json.loads(cfg_path.read_text())
    config = RunConfig.from_dict(d)
    log_dir = d.get("log_dir") or str(cfg_path.parent)
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    try:
        result = rank_main(config, rank, world_size, log_dir)
        if result is not None:
            write_text_atomic(Path(log_dir) / "result.json", json.dumps(result))
        return 0
    except BaseException as e:  # noqa: BLE001 - every failure becomes one line for the launcher
        info = describe_failure(config, rank, e)
        try:
            write_text_atomic(Path(log_dir) / f"rank-{rank}.error.json", json.dumps(info))
        except OSError:
            pass
        traceback.print_exc(file=sys.stderr)
        return 2 if info["usage"] else 1


if __name__ == "__main__":
    sys.exit(main())
