"""The per-rank training loop of tensor-, pipeline- and FSDP x tensor-parallel runs.

``python -m scalelab.runner.parallel_train CONFIG.json`` (started by
:func:`scalelab.runner.parallel_run.run_parallel`, or under torchrun) reads torchrun's
environment, joins the job (Gloo on the CPU, NCCL with one GPU per rank from LOCAL_RANK),
builds the :mod:`~scalelab.runner.mesh` of the layout, cuts its pipeline stages
(:mod:`~scalelab.runner.pipeline_parallel`), parallelizes them over the ``tp`` dimension
(:mod:`~scalelab.runner.tensor_parallel`), shards them with FSDP2 over ``dp`` when asked,
and trains: one JSON line per step to ``<workdir>/rank-<r>.jsonl``; rank 0 writes the run
(:mod:`~scalelab.runner.parallel_report`) to ``<workdir>/result.json``. Failures are
written and classified as :mod:`scalelab.runner.entry` does.

A step, on every rank (the phases of :mod:`~scalelab.runner.parallel_timing`):

1. ``data_s``: the step's global batch, this rank's data-parallel slice of it;
2. forward and backward of ``accumulation`` micro-batches of ``micro_batch`` sequences:
   through the pipeline schedule (``pp > 1``), else one after another, each loss divided
   by their number;
3. ``dp_exchange_s``: the gradients' average over the ``dp`` ranks, one all-reduce of all
   of them flattened (FSDP2 reduce-scatters inside backward instead);
4. ``optimizer_s``: the optimizer's step.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from scalelab.models.model import build, next_token_loss
from scalelab.runner import parallel_checkpoint as ckpt
from scalelab.runner.mesh import build_mesh, coords_of
from scalelab.runner.parallel_compute import apply_precision, apply_recompute
from scalelab.runner.parallel_config import ParallelRunConfig, synthetic_batch
from scalelab.runner.parallel_timing import CollectiveClock, ParallelStepTimer, is_probe


class ParallelTrainer:
    """One rank's stages of the model, its optimizers and its step."""

    def __init__(self, cfg: ParallelRunConfig, mesh, device: torch.device):
        from scalelab.runner import pipeline_parallel as ppmod

        self.cfg, self.mesh, self.device = cfg, mesh, device
        lay = cfg.layout
        self.coords = coords_of(lay, dist.get_rank())
        self.n_stages = lay.pp * lay.vpp
        self.stage_ids = ppmod.stages_of_rank(self.coords.pp, lay.pp, lay.vpp)
        self.modules = []
        for s in self.stage_ids:
            m = build(cfg.model, seed=cfg.seed)  # every stage cut from the seeded model
            if lay.pp > 1:
                ppmod.cut_stage(m, s, self.n_stages)
            m.to(device).train()
            apply_recompute(m, lay.recompute)
            apply_precision(m, lay.precision, device.type)
            if lay.tp > 1:
                from scalelab.runner.tensor_parallel import apply_tp

                apply_tp(m, mesh["tp"], lay.sequence_parallel)
            if cfg.fsdp:
                self._shard(m)
            self.modules.append(m)
        self.optimizers = [self._optimizer(m) for m in self.modules]
        self.first = 0 in self.stage_ids
        self.last = self.n_stages - 1 in self.stage_ids
        self.schedule = self.timed = None
        if lay.pp > 1:
            self.schedule, self.timed = ppmod.build_schedule(
                self.modules, self.stage_ids, self.n_stages, lay.schedule, lay.accumulation,
                next_token_loss, device, mesh["pp"].get_group())
        self.dp_group = mesh["dp"].get_group() if lay.dp > 1 else None
        self.comm = CollectiveClock() if lay.tp > 1 else None

    def _shard(self, m) -> None:
        from torch.distributed.fsdp import fully_shard

        # ZeRO-2: parameters stay gathered from forward to backward; 3 (or 0, FSDP's
        # default): resharded after each unit's forward and gathered again for backward
        reshard = self.cfg.layout.zero != 2
        for block in m.blocks.values():
            fully_shard(block, mesh=self.mesh["dp"], reshard_after_forward=reshard)
        fully_shard(m, mesh=self.mesh["dp"], reshard_after_forward=reshard)

    def _optimizer(self, m):
        params = [p for p in m.parameters() if p.requires_grad]
        if self.cfg.optimizer in ("adam", "adamw"):
            cls = torch.optim.Adam if self.cfg.optimizer == "adam" else torch.optim.AdamW
            return cls(params, lr=self.cfg.lr, foreach=False)
        return torch.optim.SGD(params, lr=self.cfg.lr, momentum=self.cfg.momentum,
                               foreach=False)

    # -- one step ------------------------------------------------------------------------
    def local_batch(self, step: int) -> torch.Tensor:
        lay = self.cfg.layout
        rows = lay.micro_batch * lay.accumulation
        tokens = synthetic_batch(self.cfg, step)
        return tokens[self.coords.dp * rows:(self.coords.dp + 1) * rows].to(self.device)

    def step(self, step: int, timer: ParallelStepTimer) -> dict:
        with timer.phase("data_s"):
            tokens = self.local_batch(step)
        # on a GPU a collective's wait only orders streams: its host time is not the
        # communication's, so nothing is probed there (tp_comm_s stays in compute_s)
        probe = (self.device.type == "cpu"
                 and is_probe(step, self.cfg.warmup_used, self.cfg.layout.tp))
        with timer.work(self.comm if probe else None, self.timed):
            losses = self._forward_backward(tokens)
            self._reduce_partial_gradients()
        if self.dp_group is not None and not self.cfg.fsdp:
            with timer.phase("dp_exchange_s"):
                self._average_gradients()
        with timer.phase("optimizer_s"):
            for opt in self.optimizers:
                opt.step()
                opt.zero_grad(set_to_none=True)
        out = {}
        if losses:
            out["loss"] = float(torch.stack([x.detach().float() for x in losses]).mean())
        return out

    def _forward_backward(self, tokens: torch.Tensor) -> list:
        lay = self.cfg.layout
        if self.schedule is not None:
            losses: list = []
            if self.first:
                self.schedule.step(tokens, target=tokens if self.last else None,
                                   losses=losses)
            elif self.last:
                self.schedule.step(target=tokens, losses=losses)
            else:
                self.schedule.step()
            return losses if self.last else []
        (model,) = self.modules
        losses = []
        for mb in tokens.split(lay.micro_batch):
            loss = next_token_loss(model(mb), mb)
            (loss / lay.accumulation).backward()
            losses.append(loss)
        return losses

    def _reduce_partial_gradients(self) -> None:
        """Sum the gradients DTensor leaves as partial sums over the tp ranks (a replicated
        weight used on slices of the sequence: the norms under sequence parallelism), so
        the optimizer's state is whole, as a checkpoint needs it."""
        for m in self.modules:
            for p in m.parameters():
                g = p.grad
                if g is not None and any(pl.is_partial() for pl in getattr(g, "placements", ())):
                    p.grad = g.redistribute(g.device_mesh, p.placements)

    def _average_gradients(self) -> None:
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        grads = [_local(p.grad) for m in self.modules for p in m.parameters()
                 if p.grad is not None]
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat, group=self.dp_group)
        flat /= self.cfg.layout.dp
        for g, new in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
            g.copy_(new)

    # -- the result ----------------------------------------------------------------------
    def named_params(self) -> dict:
        """This rank's stages' parameters, by name (each once: a tied head is one)."""
        out = {}
        for m in self.modules:
            out.update(dict(m.named_parameters()))
        return out

    def sum_of_squares(self) -> float:
        """The float64 sum of squares of every parameter of the model (a collective):
        each rank adds its local shards, divided by how many ranks hold the same shard."""
        lay = self.cfg.layout
        copies = lay.dp * lay.tp * lay.cp
        total = torch.zeros((), dtype=torch.float64)
        for p in self.named_params().values():
            local = _local(p.detach())
            shards = 1
            if hasattr(p, "placements"):
                for dim, pl in enumerate(p.placements):
                    if pl.is_shard():
                        shards *= p.device_mesh.size(dim)
            total += local.double().pow(2).sum().cpu() / (copies // shards)
        dist.all_reduce(total)
        return float(total)

    def full_params(self) -> dict:
        """Every parameter of this rank's stages whole, on the CPU (a collective of the
        ranks of its stage)."""
        return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu().clone()
                for n, p in self.named_params().items()}

    def param_bytes(self) -> int:
        return sum(_local(p).numel() * p.element_size() for p in self.named_params().values())


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _log(path: Path | None, rec: dict) -> None:
    if path is not None:
        with open(path, "a") as f:
            f.write(json.dumps(rec) + "\n")


def train(cfg: ParallelRunConfig, trainer: ParallelTrainer, log_path: Path | None,
          base: dict) -> tuple[list[dict], int]:
    """Resume if asked, run the steps with checkpoints; the step records and the start."""
    start = 0
    if cfg.resume:
        start = ckpt.resume(cfg.checkpoint_dir, trainer.modules, trainer.optimizers,
                            cfg.identity())
    records = []
    for step in range(start, cfg.steps):
        timer = ParallelStepTimer(sync=_sync_of(trainer.device))
        timer.start()
        extra = trainer.step(step, timer)
        rec = {"type": "step", **base, **timer.stop(), **extra, "step": step, "of": cfg.steps}
        records.append(rec)
        _log(log_path, rec)
        if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
            ckpt.save(cfg.checkpoint_dir, step + 1, trainer.modules, trainer.optimizers,
                      cfg.identity())
    return records, start


def _sync_of(device: torch.device):
    if device.type == "cuda":
        return torch.cuda.synchronize
    return None


def run_rank(cfg: ParallelRunConfig, rank: int, world_size: int, workdir: Path | None,
             local_rank: int = 0) -> dict | None:
    """Play ``rank``'s part; rank 0 returns the run (the content of run.json)."""
    from scalelab.errors import UsageError
    from scalelab.runner import parallel_report

    if world_size != cfg.world_size:
        raise UsageError(f"world size {world_size} does not match the layout: "
                         f"{cfg.layout.describe()} needs {cfg.world_size} ranks")
    threads = cfg.threads or int(os.environ.get("SCALELAB_THREADS", "0") or 0)
    if threads:
        torch.set_num_threads(threads)
    init = {}
    if cfg.device == "cuda":  # one GPU per rank; not run on this project's CPU machines
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
        init["device_id"] = device
    else:
        device, backend = torch.device("cpu"), "gloo"
    t0 = time.perf_counter()
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=cfg.timeout_s), **init)
    from scalelab.runner import entry

    entry.opened_process_group = True
    try:
        mesh = build_mesh(cfg.layout, device.type)
        trainer = ParallelTrainer(cfg, mesh, device)
        c = trainer.coords
        base = {"rank": rank, "role": "worker", "index": rank, "pid": os.getpid(),
                "pp": c.pp, "dp": c.dp, "tp": c.tp}
        log_path = workdir / f"rank-{rank}.jsonl" if workdir else None
        records, start = train(cfg, trainer, log_path, base)
        summary = {"resumed_from_step": start, "param_bytes": trainer.param_bytes(),
                   "stages": trainer.stage_ids, "first": trainer.first, "last": trainer.last,
                   "coords": base}
        checksum = trainer.sum_of_squares()
        params = trainer.full_params() if cfg.final_params_path else None
        mine = params if (params is not None and c.dp == 0 and c.tp == 0) else None
        gathered = [None] * world_size
        dist.gather_object({"rank": rank, "records": records, "summary": summary,
                            "params": mine}, gathered if rank == 0 else None, dst=0)
        result = None
        if rank == 0:
            if cfg.final_params_path:
                _save_params(cfg.final_params_path, gathered)
            for g in gathered:
                g.pop("params", None)
            result = parallel_report.build(cfg, gathered, time.perf_counter() - t0, checksum)
            if workdir:
                from scalelab.results import write_text_atomic

                write_text_atomic(workdir / "result.json", json.dumps(result))
        dist.barrier()
        if workdir:
            (workdir / f"done-{rank}").touch()
        return result
    finally:
        dist.destroy_process_group()


def _save_params(path: str, gathered: list[dict]) -> None:
    import io

    from scalelab.results import write_text_atomic

    merged = {}
    for g in gathered:
        merged.update(g.get("params") or {})
    buf = io.BytesIO()
    torch.save(merged, buf)
    write_text_atomic(path, buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    """The rank's process: ``CONFIG.json`` in the job folder; exit 0, 1 (failure) or 2."""
    import traceback

    from scalelab.runner.entry import classify, env_rank, one_line

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m scalelab.runner.parallel_train CONFIG.json", file=sys.stderr)
        return 2
    config_path = Path(argv[0])
    workdir = config_path.parent
    rank = int(os.environ.get("RANK", "-1"))
    try:
        cfg = ParallelRunConfig.from_dict(json.loads(config_path.read_text()))
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
