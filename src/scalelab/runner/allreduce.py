"""The all-reduce baseline: torch DDP on the same model, data, optimizer and batch.

DDP averages gradients with bucketed all-reduce launched from backward hooks, so the
exchange overlaps backward and finishes inside ``loss.backward()``: ``compute_s`` here is
forward + backward + the exposed part of the all-reduce, ``apply_s`` the optimizer step.
With ``accumulation_steps`` K the step is K micro-batches under ``no_sync`` but the last
(:mod:`scalelab.runner.accumulate`): ``compute_s`` holds all K, the all-reduce runs once.

On the CPU the process group is Gloo and DDP wraps the CPU module, as always. On a GPU the
model and every batch live on the rank's device, the process group is NCCL (initialised
with ``device_id`` by :mod:`scalelab.runner.entry`) and DDP gets ``device_ids=[index]``.
DDP's buckets are the gradients' own memory (``gradient_as_bucket_view=True``): by default
DDP keeps its buckets beside the gradients, one more gradient-sized buffer, so a batch that
fits a plain training step (what ``scalelab profile`` measures) could fail under DDP. With
views it does not: vgg11 at 3x32x32, batch 2, one Gloo rank on the CPU peaked at 4,133 MiB
resident plain, 4,594 MiB under DDP with its default buckets (+461 MiB, about its 507 MiB of
gradients) and 4,095 MiB with bucket views, with the same final parameters.

One worker trains the plain module: the all-reduce of one rank is the identity, but DDP
still runs it, and with ``zero_grad(set_to_none=True)`` copies every gradient into its
bucket multiplied by 1/world_size each step (``torch::distributed::reducer::mul_out``, 186
calls in three resnet18 steps under ``torch.profiler``), besides its Python forward. The
arithmetic is the same (x * 1.0 is exact), so the final parameters are too.

The GPU branch has not run on a GPU in this project's CPU tests (a ``gpu``-marked test
covers it where CUDA is present).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from scalelab.runner import checkpoint
from scalelab.runner.accumulate import PeakMemory, accumulate
from scalelab.runner.compute import Computation
from scalelab.runner.timers import StepTimer, maybe_phase
from scalelab.workload import logits_of


class DDPWorker:
    def __init__(self, cfg, index: int, model, shards, identity: dict,
                 device: torch.device | str = "cpu"):
        self.cfg, self.k, self.shards, self.identity = cfg, index, shards, identity
        self.device = torch.device(device)
        self.comp = Computation(cfg.algorithm, self.device)
        self.module = self.comp.model(model.to(self.device))
        self.wrapped = cfg.workers > 1
        if self.wrapped:
            # gradients are views into DDP's buckets: no second, gradient-sized copy (above)
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(self.module, device_ids=ids,
                                               gradient_as_bucket_view=True)
        else:  # one rank: the all-reduce is the identity, and DDP would still copy (above)
            self.ddp = self.module
        self.opt = cfg.workload.make_optimizer(self.ddp.parameters())
        self.loss_fn = cfg.workload.loss_fn()
        self.scaler = self.comp.scaler()
        params = [p for p in model.parameters() if p.requires_grad]
        self.param_bytes = sum(p.numel() * p.element_size() for p in params)
        self.peak = PeakMemory(self.device, cfg.warmup_steps)

    def resume(self, directory: str) -> int:
        """Rank 0 reads the newest checkpoint and hands it to every rank; returns its step."""
        payload = [None]
        if dist.get_rank() == 0:
            steps = checkpoint.steps_of(directory, "ddp")
            if steps:
                path = checkpoint.path_for(directory, "ddp", max(steps))
                data = checkpoint.load(path)
                checkpoint.check_identity(path, data, self.identity)
                payload = [data]
        dist.broadcast_object_list(payload, src=0)
        data = payload[0]
        if data is None:
            return 0
        self.module.load_state_dict(data["model"])
        self.opt.load_state_dict(data["optimizer"])
        if self.scaler is not None and data.get("scaler"):
            self.scaler.load_state_dict(data["scaler"])
        return int(data["step"])

    def save(self, step: int) -> None:
        checkpoint.save(self.cfg.checkpoint_dir, "ddp", step, {
            "identity": self.identity, "step": step,
            "model": self.module.state_dict(), "optimizer": self.opt.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None})

    def step(self, step: int, timer: StepTimer | None) -> dict:
        with maybe_phase(timer, "data_s"):
            x, y = self.shards.shard(step, self.k)  # on the device already (open_shards)
            x = self.comp.batch(x.to(self.device, non_blocking=True))
            y = y.to(self.device, non_blocking=True)
        self.peak.at_step(step)
        self.opt.zero_grad(set_to_none=True)
        with maybe_phase(timer, "compute_s"):  # K micro-batches, one all-reduce (accumulate)
            loss = accumulate(self.cfg.accumulation_steps, x, y, self._forward_loss,
                              self._backward, self.ddp.no_sync if self.wrapped else None)
        with maybe_phase(timer, "apply_s"):
            if self.scaler is not None:
                self.scaler.step(self.opt)
                self.scaler.update()
            else:
                self.opt.step()
        ahead = getattr(self.shards, "prefetch", None)  # a GPU's next batch, copied meanwhile
        if ahead is not None:
            ahead(step + 1)
        # the loss stays a tensor: reading it here would wait for the device every step
        return {"loss": loss.detach(),
                "bytes_reduced": self.param_bytes if self.wrapped else 0}

    def _forward_loss(self, x, y):
        with self.comp.autocast():
            return self.loss_fn(logits_of(self.ddp(x)), y)

    def _backward(self, loss) -> None:
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    @property
    def params(self) -> list[torch.Tensor]:
        return [p for p in self.module.parameters() if p.requires_grad]
