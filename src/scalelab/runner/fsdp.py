"""Sharded data parallelism: ZeRO-1, ZeRO-2 and ZeRO-3 on the same model, data and optimizer.

Levels (``RunConfig.shard_level``; the layouts of :mod:`scalelab.theory.zero`):

- **3** (ZeRO-3, FSDP full shard): FSDP2 ``fully_shard`` on every block of the model
  (:func:`blocks`) and on the root, ``reshard_after_forward=True``: a block's parameters
  are all-gathered before its forward, freed after it, gathered again for its backward
  (FSDP2 prefetches the next block's), and its gradients reduce-scattered to their shards.
- **2** (ZeRO-2): the same units with ``reshard_after_forward=False``: parameters gathered
  once in forward stay whole until backward has used them, gradients reduce-scattered.
- **1** (ZeRO-1): torch's ``ZeroRedundancyOptimizer`` over DDP. DDP all-reduces the whole
  gradient; each rank keeps the optimizer state of the parameters it owns (whole tensors,
  placed by size), updates them and broadcasts them to the others.

Between steps every rank holds the shards its level says, counted from the tensors in
:meth:`FSDPWorker.model_state_bytes`. Checkpoints are written with
``torch.distributed.checkpoint`` (every rank its shards, in parallel) to
``<dir>/fsdp-step<NNNNNNNN>/``, with the run's identity in ``identity.json`` beside the
shards; a resumed run reads the newest complete one. Phases as DDP's: ``compute_s`` is
forward + backward with the exchange that does not hide behind them (the gradients'
reduce-scatter, and with levels 2/3 the parameters' all-gathers), ``apply_s`` the optimizer
step (with level 1 including the broadcast of the updated parameters).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from scalelab.errors import UsageError
from scalelab.results import write_text_atomic
from scalelab.runner import checkpoint
from scalelab.runner.accumulate import accumulate, current_bytes
from scalelab.runner.timers import StepTimer, maybe_phase
from scalelab.workload import logits_of

OWNER = "fsdp"


def blocks(model: nn.Module) -> list[nn.Module]:
    """The units FSDP2 shards one by one (:func:`scalelab.blocks.fsdp_units`: residual
    blocks, transformer blocks, a ViT's encoder layers)."""
    from scalelab.blocks import fsdp_units

    return fsdp_units(model)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _nbytes(t: torch.Tensor | None) -> int:
    if t is None:
        return 0
    loc = _local(t)
    return loc.numel() * loc.element_size()


class FSDPWorker:
    def __init__(self, cfg, index: int, model: nn.Module, shards, identity: dict,
                 device: torch.device | str = "cpu"):
        self.cfg, self.k, self.shards, self.identity = cfg, index, shards, identity
        self.level = cfg.shard_level
        self.device = torch.device(device)
        from scalelab.runner.compute import Computation

        # --algorithm: memory format before sharding, autocast around forward (no fp16
        # loss scaling: RunConfig refuses it here)
        self.comp = Computation(getattr(cfg, "algorithm", "default"), self.device)
        model = self.comp.model(model.to(self.device))
        params = [p for p in model.parameters() if p.requires_grad]
        self.param_numel = sum(p.numel() for p in params)
        self.param_bytes = sum(p.numel() * p.element_size() for p in params)
        self.unit_numels: list[int] = []
        if self.level == 1:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.module = model
            # gradients are views of DDP's buckets: the buckets are the gradients' memory
            self.wrapped = DistributedDataParallel(model, device_ids=ids,
                                                   gradient_as_bucket_view=True)
            self.opt = self._zero_optimizer(ZeroRedundancyOptimizer, params)
        else:
            from torch.distributed.fsdp import fully_shard

            reshard = self.level == 3
            for b in blocks(model):
                self.unit_numels.append(sum(p.numel() for p in b.parameters()))
                fully_shard(b, reshard_after_forward=reshard)
            fully_shard(model, reshard_after_forward=reshard)
            self.module = self.wrapped = model
            self.opt = cfg.workload.make_optimizer(
                [p for p in model.parameters() if p.requires_grad])
        self.loss_fn = cfg.workload.loss_fn()
        self.memory: dict = {}
        self._measure_from = max(cfg.warmup_steps, 0)

    def _zero_optimizer(self, cls, params):
        optimizer_class, kw = self.cfg.workload.optimizer_class()
        return cls(params, optimizer_class=optimizer_class, **kw)

    # -- the step ---------------------------------------------------------------------
    def step(self, step: int, timer: StepTimer | None) -> dict:
        if step == self._measure_from or not self.memory:
            self._start_memory()
        with maybe_phase(timer, "data_s"):
            x, y = self.shards.shard(step, self.k)
            x = self.comp.batch(x.to(self.device, non_blocking=True))
            y = y.to(self.device, non_blocking=True)
        self.opt.zero_grad(set_to_none=True)
        with maybe_phase(timer, "compute_s"):  # K micro-batches, one exchange (accumulate)
            loss = accumulate(self.cfg.accumulation_steps, x, y, self._forward_loss,
                              lambda loss: loss.backward(), self._sync_off)
        with maybe_phase(timer, "apply_s"):
            self.opt.step()
        ahead = getattr(self.shards, "prefetch", None)  # a GPU's next batch, copied meanwhile
        if ahead is not None:
            ahead(step + 1)
        # the loss stays a tensor (read by the step loop a step later, as DDP's)
        return {"loss": loss.detach(), **self.exchange_payload()}

    def _forward_loss(self, x, y):
        with self.comp.autocast():
            return self.loss_fn(logits_of(self.wrapped(x)), y)

    @contextlib.contextmanager
    def _sync_off(self):
        """The exchange held back for a micro-batch that is not the last: DDP's
        ``no_sync`` (ZeRO-1), FSDP2's ``set_requires_gradient_sync(False)`` (ZeRO-2/3: the
        gradients accumulate whole and unreduced until the last backward)."""
        if self.level == 1:
            with self.wrapped.no_sync():
                yield
            return
        self.module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.module.set_requires_gradient_sync(True)

    def exchange_payload(self) -> dict:
        """Bytes of tensors entering the collectives per step (as DDP's ``bytes_reduced``):
        ``bytes_reduced`` the gradients (all-reduced at level 1, reduce-scattered at 2/3),
        ``bytes_gathered`` the parameters (broadcast from their owners at level 1,
        all-gathered once at level 2, twice at level 3, per micro-batch)."""
        gathers = {1: 1, 2: 1, 3: 2}[self.level]
        if self.level > 1:  # FSDP2 reshards after every backward: each micro-batch gathers
            gathers *= self.cfg.accumulation_steps
        return {"bytes_reduced": self.param_bytes, "bytes_gathered": gathers * self.param_bytes}

    # -- what this rank holds ---------------------------------------------------------
    def _start_memory(self) -> None:
        """Start the peak at the first timed step; what the process holds besides the
        model state then (the interpreter, libraries, allocator slack) is the baseline:
        resident bytes (CPU) or allocated bytes (CUDA) less the state counted from tensors."""
        from scalelab.profiler.memory import reset_peak_memory

        state = sum(self.model_state_bytes().values())
        reset_peak_memory(self.device)
        self.memory = {"state_at_start_bytes": state,
                       "baseline_bytes": current_bytes(self.device) - state}

    def memory_summary(self) -> dict:
        """Peak of the timed steps, and the model's part of it (peak less the baseline)."""
        from scalelab.profiler.memory import peak_memory_bytes

        if not self.memory:
            return {}
        peak = peak_memory_bytes(self.device)
        return {**self.memory, "peak_bytes": peak,
                "peak_model_bytes": peak - self.memory["baseline_bytes"]}


    def model_state_bytes(self) -> dict:
        """This rank's parameters, gradients and optimizer state, counted from its tensors
        (the local shards of sharded tensors), in bytes."""
        params = [p for p in self.module.parameters() if p.requires_grad]
        opt = self.opt.optim if self.level == 1 else self.opt
        state = 0
        for st in opt.state.values():
            for v in st.values():
                if torch.is_tensor(v) and v.dim() > 0:
                    state += _nbytes(v)
        return {"param_bytes": sum(_nbytes(p) for p in params),
                "grad_bytes": sum(_nbytes(p.grad) for p in params),
                "optimizer_bytes": state}

    @property
    def params(self) -> list[torch.Tensor]:
        """The whole parameters (gathered from every rank at levels 2/3: a collective)."""
        out = []
        for p in self.module.parameters():
            if p.requires_grad:
                out.append(p.full_tensor() if hasattr(p, "full_tensor") else p)
        return out

    def named_full_params(self) -> dict[str, torch.Tensor]:
        """Every parameter whole, by name (a collective at levels 2/3)."""
        return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu().clone()
                for n, p in self.module.named_parameters()}

    # -- checkpoints ------------------------------------------------------------------
    def _state(self) -> dict:
        if self.level == 1:
            self._materialize_optimizer_state()
            return {"model": self.module.state_dict(),
                    f"optim{dist.get_rank()}": self.opt.optim.state_dict()}
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.module, self.opt)
        return {"model": model_sd, "optim": optim_sd}

    def _materialize_optimizer_state(self) -> None:
        """Create the owned parameters' optimizer state (zero gradients, lr 0: nothing
        moves) so that a checkpoint's tensors have somewhere to load into."""
        inner = self.opt.optim
        if inner.state:
            return
        lrs = [g["lr"] for g in inner.param_groups]
        for g in inner.param_groups:
            g["lr"] = 0.0
            for p in g["params"]:
                p.grad = torch.zeros_like(p)
        inner.step()
        for g, lr in zip(inner.param_groups, lrs):
            g["lr"] = lr
            for p in g["params"]:
                p.grad = None

    def save(self, step: int) -> None:
        import torch.distributed.checkpoint as dcp

        root = Path(self.cfg.checkpoint_dir)
        path = root / f"{OWNER}-step{step:08d}"
        dcp.save(self._state(), checkpoint_id=str(path))
        dist.barrier()
        if dist.get_rank() == 0:
            write_text_atomic(path / "identity.json",
                              json.dumps({"identity": self.identity, "step": step}))
            for old in sorted(steps_of(self.cfg.checkpoint_dir))[:-checkpoint.KEEP]:
                shutil.rmtree(root / f"{OWNER}-step{old:08d}", ignore_errors=True)

    def resume(self, directory: str) -> int:
        """Load the newest complete checkpoint every rank sees; returns its step (0: none)."""
        import torch.distributed.checkpoint as dcp

        mine = max(steps_of(directory), default=0)
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        step = min(everyone)
        if not step:
            return 0
        path = Path(directory) / f"{OWNER}-step{step:08d}"
        check_identity(path, self.identity)
        state = self._state()
        dcp.load(state, checkpoint_id=str(path))
        if self.level == 1:
            self.module.load_state_dict(state["model"])
            self.opt.optim.load_state_dict(state[f"optim{dist.get_rank()}"])
        else:
            from torch.distributed.checkpoint.state_dict import set_state_dict

            set_state_dict(self.module, self.opt, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])
        return step


def steps_of(directory: str | None) -> set[int]:
    """Steps of the complete checkpoints in ``directory`` (identity written last)."""
    d = Path(directory) if directory else None
    if d is None or not d.is_dir():
        return set()
    out = set()
    for f in d.glob(f"{OWNER}-step*/identity.json"):
        try:
            out.add(int(f.parent.name.removeprefix(f"{OWNER}-step")))
        except ValueError:
            continue
    return out


def check_identity(path: Path, expected: dict) -> None:
    """The checkpoint's identity (``identity.json``) against this run's, as the other
    checkpoints are checked (:func:`scalelab.runner.checkpoint.check_identity`)."""
    try:
        payload = json.loads((path / "identity.json").read_text())
    except (OSError, ValueError):
        raise UsageError(f"{path}: not a scalelab checkpoint") from None
    checkpoint.check_identity(path, payload, expected)


def check_directory(directory: str, expected: dict) -> None:
    """Reject, before any rank starts, a folder whose newest checkpoint is another model's."""
    steps = steps_of(directory)
    if steps:
        check_identity(Path(directory) / f"{OWNER}-step{max(steps):08d}", expected)
