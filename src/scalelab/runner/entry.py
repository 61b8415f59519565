"""The per-process entry point: ``python -m scalelab.runner.entry CONFIG.json``.

Reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
takes its device from :func:`scalelab.runner.devices.for_rank` (a worker's GPU from its
position on the host; ``torch.cuda.set_device``), joins the job (Gloo, or NCCL initialised
with ``device_id`` for all-reduce on GPUs), plays its role (parameter-server worker or
server, or DDP worker), streams one JSON line per step to ``<workdir>/rank-<r>.jsonl``
and, on rank 0, writes the assembled run to ``<workdir>/result.json``. A failure is written
to ``<workdir>/error-<r>.json`` (one line: what failed and where) and the exit code is 2
for bad input, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from scalelab.errors import RunFailure, UsageError
from scalelab.runner import checkpoint, devices, report
from scalelab.runner.comm import CommError
from scalelab.runner.config import RunConfig
from scalelab.runner.loader import open_shards
from scalelab.runner.partition import make_layout
from scalelab.runner.timers import HOST_CLOCK, DeviceClock, StepTimer


class RankLog:
    def __init__(self, path: Path | None, base: dict):
        self.base = base
        self.records: list[dict] = []
        self.f = open(path, "a", buffering=1) if path else None  # noqa: SIM115

    def step(self, rec: dict) -> None:
        rec = {"type": "step", **self.base, **rec}
        self.records.append(rec)
        if self.f:
            self.f.write(json.dumps(rec) + "\n")

    def close(self) -> None:
        if self.f:
            self.f.close()


opened_process_group = False
"""True once this process has been a rank (a torchrun rank runs inside the ``scalelab``
command): the command then ends with :func:`scalelab.runner.launch.leave` (see
:func:`scalelab.cli.main`)."""


def env_rank() -> tuple[int, int, int]:
    try:
        return (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                int(os.environ.get("LOCAL_RANK", "0")))
    except KeyError as e:
        raise UsageError(
            f"--launcher torchrun needs torchrun's environment ({e.args[0]} is not set): "
            "start it with torchrun"
        ) from None
    except ValueError as e:
        raise UsageError(f"malformed torchrun environment: {e}") from None


def checksum(params) -> float:
    return float(sum(p.detach().double().pow(2).sum() for p in params))


def _resume_step(cfg: RunConfig, role: str, k: int) -> int:
    """The newest checkpoint step every server has (0 without checkpoints)."""
    mine = checkpoint.steps_of(cfg.checkpoint_dir, f"ps{k}") if role == "server" else None
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    sets = [s for s in everyone if s is not None]
    common = set.intersection(*sets) if sets else set()
    return max(common, default=0)


def run_rank(cfg: RunConfig, rank: int, world_size: int, workdir: Path | None,
             local_rank: int | None = None) -> dict | None:
    """Play ``rank``'s part in the job; rank 0 returns the assembled run (run.json content).

    ``local_rank``: the rank's position on its host (torchrun's LOCAL_RANK; the local
    launcher's ranks all share one host, LOCAL_RANK = RANK), which picks its GPU.
    """
    if world_size != cfg.world_size:
        roles = (f"{cfg.workers} workers + {cfg.ps} servers" if cfg.architecture == "ps"
                 else f"{cfg.workers} workers")
        raise UsageError(f"world size {world_size} does not match the roles: {roles} "
                         f"need {cfg.world_size} ranks")
    role, k = cfg.role_of(rank)
    threads = cfg.threads or int(os.environ.get("SCALELAB_THREADS", "0") or 0)
    if role == "server" and not cfg.threads:
        threads = 1
    if threads:
        torch.set_num_threads(threads)
    place = devices.for_rank(cfg, rank, rank if local_rank is None else local_rank,
                             torch.cuda.device_count() if cfg.device == "cuda" else 0)
    init = {}
    if place.is_cuda:
        torch.cuda.set_device(place.cuda_index)
        if place.backend == "nccl":
            init["device_id"] = torch.device(place.device)
    t_start = time.perf_counter()
    dist.init_process_group(place.backend, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=cfg.timeout_s), **init)
    global opened_process_group
    opened_process_group = True
    log = RankLog(workdir / f"rank-{rank}.jsonl" if workdir else None,
                  {"rank": rank, "role": role, "index": k})
    try:
        spec = cfg.workload
        model = spec.build_model(seed=cfg.seed)
        model.train()
        if role == "worker":
            model.to(place.device)
            if cfg.recompute == "full":  # every block recomputed in backward (blocks.py)
                from scalelab.blocks import checkpoint_blocks

                checkpoint_blocks(model)
        ident = checkpoint.identity(cfg, model)
        summary: dict = {}
        from scalelab.runner.compute import Computation

        with Computation(cfg.algorithm, place.device).flags():  # cuDNN benchmark, TF32
            if cfg.architecture == "allreduce":
                summary = _run_ddp(cfg, k, model, ident, log, place)
            elif cfg.architecture == "fsdp":
                summary = _run_fsdp(cfg, k, model, ident, log, place)
            else:
                summary = _run_ps(cfg, role, k, model, ident, log, place)
        gathered = [None] * world_size
        dist.gather_object({"rank": rank, "role": role, "index": k, "records": log.records,
                            "summary": summary}, gathered if rank == 0 else None, dst=0)
        result = None
        if rank == 0:
            result = report.build(cfg, gathered, time.perf_counter() - t_start)
            if workdir:
                from scalelab.results import write_text_atomic

                write_text_atomic(workdir / "result.json", json.dumps(result))
        dist.barrier()
        if workdir:  # every rank is past the barrier and rank 0 has written the result
            (workdir / f"done-{rank}").touch()
        return result
    finally:
        log.close()
        dist.destroy_process_group()


def clock_for(place):
    """The step clock of a rank: CUDA events on a GPU worker, the host's clock otherwise."""
    if place is not None and place.is_cuda:
        return DeviceClock(torch.cuda.Event)
    return HOST_CLOCK


def _plain(extra: dict) -> dict:
    """A step's extra fields as plain numbers (a loss tensor is read here, not in the step)."""
    return {k: (float(v) if isinstance(v, torch.Tensor) else v) for k, v in extra.items()}


def _steps(cfg, start: int, body, log, place=None):
    """Run steps ``start..cfg.steps-1``, one :class:`StepTimer` each, and log them.

    On a device clock a step is read (its events, its loss) only once the next step has been
    queued, so the host never waits for the device to drain: the only waits are those the
    training itself has. The last step is read after the loop.
    """
    clock = clock_for(place)
    pending = None
    prev = None
    for step in range(start, cfg.steps):
        timer = StepTimer(clock=clock, after=prev)
        timer.start_step()
        extra = body(step, timer)
        timer.stop()
        if clock.deferred:
            if pending is not None:
                _log_step(log, cfg, *pending)
            pending = (timer, extra, step)
        else:
            _log_step(log, cfg, timer, extra, step)
        prev = timer
    if pending is not None:
        _log_step(log, cfg, *pending)


def _log_step(log, cfg, timer, extra, step) -> None:
    log.step({**timer.record(), **_plain(extra), "step": step, "of": cfg.steps})


def _train_worker(cfg, k, make_worker, log, place, every_rank_saves: bool):
    """Build a data-parallel worker on its shards, resume it if asked, run its steps with a
    checkpoint every ``cfg.checkpoint_every`` (rank 0's, or every rank's for sharded state);
    returns the worker and the step it started from."""
    with open_shards(cfg, k, device=place.device) as shards:
        w = make_worker(shards)
        start = w.resume(cfg.checkpoint_dir) if cfg.resume else 0

        def body(step, timer):
            out = w.step(step, timer)
            if (cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0
                    and (every_rank_saves or dist.get_rank() == 0)):
                w.save(step + 1)
            return out

        _steps(cfg, start, body, log, place)
    return w, start


def _run_ddp(cfg, k, model, ident, log, place) -> dict:
    from scalelab.runner.allreduce import DDPWorker

    w, start = _train_worker(
        cfg, k, lambda shards: DDPWorker(cfg, k, model, shards, ident, place.device), log,
        place, every_rank_saves=False)
    summary = {"resumed_from_step": start, "param_bytes": w.param_bytes,
               "memory": w.peak.summary()}
    if k == 0:
        summary["final_param_checksum"] = checksum(w.params)
        _save_params(cfg, dict(w.module.named_parameters()))
    return summary


def _run_fsdp(cfg, k, model, ident, log, place) -> dict:
    """Sharded data parallelism (:mod:`scalelab.runner.fsdp`), stepped as DDP is."""
    from scalelab.runner.fsdp import FSDPWorker

    w, start = _train_worker(  # every rank writes its shards
        cfg, k, lambda shards: FSDPWorker(cfg, k, model, shards, ident, place.device), log,
        place, every_rank_saves=True)
    summary = {"resumed_from_step": start, "param_bytes": w.param_bytes,
               "shard_level": cfg.shard_level, "model_state": w.model_state_bytes(),
               "memory": w.memory_summary(),
               "unit_numels": w.unit_numels}
    full = w.named_full_params()  # a collective: every rank takes part
    if k == 0:
        summary["final_param_checksum"] = checksum(full.values())
        _save_params(cfg, full)
    return summary


def _save_params(cfg, params: dict) -> None:
    """The final parameters (name -> tensor) to ``cfg.final_params_path``, if one is set."""
    if cfg.final_params_path:
        import io

        from scalelab.results import write_text_atomic

        buf = io.BytesIO()
        torch.save({n: p.detach().cpu().clone() for n, p in params.items()}, buf)
        write_text_atomic(cfg.final_params_path, buf.getvalue())


def _run_ps(cfg, role, k, model, ident, log, place) -> dict:
    from scalelab.runner import ps
    from scalelab.runner.compute import Computation

    # servers hold the model in the workers' memory format: a piece is the same elements
    model = Computation(cfg.algorithm, place.device if role == "worker" else "cpu").model(model)
    params = ps.trainable(model)
    elem = params[0].element_size()
    piece_elems = None
    if cfg.piece_bytes and cfg.mode == "sync":
        piece_elems = max(1, cfg.piece_bytes // elem)
    layout = make_layout([p.numel() for p in params], cfg.ps, cfg.partition, piece_elems)
    start = _resume_step(cfg, role, k) if cfg.resume else 0
    segments = None
    if cfg.transport == "shm":  # every rank on this host (RunConfig.shm_refusal)
        from scalelab.runner.shm import open_segments

        segments = open_segments(cfg, role, k, layout, params[0].dtype)
    if role == "server":
        server = ps.Server(cfg, k, model, layout, ident, log,
                           segments[k] if segments else None)
        if start:
            path = checkpoint.path_for(cfg.checkpoint_dir, f"ps{k}", start)
            payload = checkpoint.load(path)
            checkpoint.check_identity(path, payload, ident)
            server.load(payload)
        server.initial_push()
        if cfg.mode == "async":
            return server.run_async(cfg.workers * cfg.steps, log.step)

        def body(step, timer):
            out = server.step_sync(step, timer)
            if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
                ps.save_checkpoint(server, step + 1)
            return out

        _steps(cfg, start, body, log)
        return {"shard_bytes": server.shard_bytes}
    with open_shards(cfg, k, device=place.device) as shards:
        worker = ps.Worker(cfg, k, model, layout, shards, log, place.device, segments)
        worker.initial_pull()
        _steps(cfg, start, worker.step, log, place)
    if cfg.mode == "async":
        worker.final_pull()
    worker.close()
    summary = {"resumed_from_step": start, "memory": worker.peak.summary(),
               "param_bytes": sum(p.numel() for p in params) * elem,
               "shard_fractions": layout.shard_fractions()}
    if k == 0:
        summary["final_param_checksum"] = checksum(params)
        _save_params(cfg, dict(model.named_parameters()))
    return summary


def classify(exc: BaseException) -> str:
    if isinstance(exc, UsageError):
        return "usage"
    if isinstance(exc, CommError):
        return "comm"
    text = str(exc).lower()
    if isinstance(exc, RuntimeError) and any(
            w in text for w in ("gloo", "nccl", "connection", "timed out", "socket", "peer")):
        return "comm"
    return "local"


def one_line(exc: BaseException) -> str:
    text = str(exc)
    if "Original Traceback" in text:  # raised again from a loader process: its last line
        last = [ln.strip() for ln in text.splitlines() if ln.strip()][-1]
        name, sep, rest = last.partition(": ")
        text = rest if sep and name.rsplit(".", 1)[-1] == type(exc).__name__ else last
    text = " ".join(text.split()) or type(exc).__name__
    if isinstance(exc, (UsageError, RunFailure, CommError)):
        return text[:400]
    return f"{type(exc).__name__}: {text[:400]}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m scalelab.runner.entry CONFIG.json", file=sys.stderr)
        return 2
    config_path = Path(argv[0])
    workdir = config_path.parent
    rank = int(os.environ.get("RANK", "-1"))
    try:
        cfg = RunConfig.from_dict(json.loads(config_path.read_text()))
        rank, world_size, local_rank = env_rank()
        run_rank(cfg, rank, world_size, workdir, local_rank)
        return 0
    except BaseException as e:  # noqa: BLE001 - every failure becomes one line
        kind = classify(e) if not isinstance(e, KeyboardInterrupt) else "local"
        err = {"rank": rank, "kind": kind, "error": one_line(e), "time": time.time(),
               "traceback": traceback.format_exc(limit=8)}
        try:
            (workdir / f"error-{rank}.json").write_text(json.dumps(err))
        except OSError:
            pass
        print(f"rank {rank}: {err['error']}", file=sys.stderr)
        return 2 if kind == "usage" else 1


if __name__ == "__main__":
    from scalelab.runner.launch import leave

    leave(main())
