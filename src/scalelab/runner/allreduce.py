"""The all-reduce baseline: torch DDP on the same model, data, optimizer and batch.

DDP averages gradients with bucketed all-reduce overlapped with backward, so the exchange is
inside ``compute_s``; ``apply_s`` is the optimizer step every worker runs on the whole model.
Rank 0 writes checkpoints; on resume every rank loads the same file (a shared directory).
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from scalelab.runner import checkpoint
from scalelab.runner.comm import param_checksum
from scalelab.runner.data import make_data
from scalelab.runner.timers import maybe_phase
from scalelab.workload import logits_of


def run_ddp_worker(ctx) -> dict:
    cfg, k = ctx.config, ctx.index
    spec = cfg.workload
    model = spec.build_model(cfg.seed)
    model.train()
    opt = spec.make_optimizer(model.parameters())
    shapes = [tuple(p.shape) for p in model.parameters() if p.requires_grad]
    if cfg.start_step:
        st = checkpoint.load(cfg.checkpoint_dir, "ddp", cfg.start_step)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["optimizer"])
    ddp = DistributedDataParallel(model, broadcast_buffers=False)
    loss_fn = spec.loss_fn()
    data = make_data(cfg)
    ident = checkpoint.identity(cfg, shapes)
    total = cfg.steps - cfg.start_step
    for step in range(cfg.start_step, cfg.steps):
        timer = ctx.timer
        timer.start(step)
        with maybe_phase(timer, "data_s"):
            x, y = data.batch(step, k)
        with maybe_phase(timer, "compute_s"):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(logits_of(ddp(x)), y)
            loss.backward()
        with maybe_phase(timer, "apply_s"):
            opt.step()
        done = step + 1
        if k == 0 and cfg.checkpoint_every and done % cfg.checkpoint_every == 0:
            with maybe_phase(timer, "checkpoint_s"):
                checkpoint.save(cfg.checkpoint_dir, "ddp", done, {
                    "identity": ident, "step": done,
                    "model": {n: t.detach().clone() for n, t in model.state_dict().items()},
                    "optimizer": opt.state_dict(),
                })
        ctx.step_done(loss=float(loss.detach()))
        ctx.progress(done - cfg.start_step, total)
    params = [p for p in model.parameters() if p.requires_grad]
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    result = {"bytes": {"allreduce_bytes": param_bytes}}
    if k == 0:
        result["final_param_checksum"] = param_checksum(params)
        if cfg.final_params_path:
            flat = torch.cat([p.detach().reshape(-1) for p in params])
            ctx.save_tensor(cfg.final_params_path, flat)
    return result
