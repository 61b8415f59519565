"""The sharded parameter server: worker and server loops over point-to-point messages.

Synchronous step, per worker: forward, then backward; a gradient hook sends every piece of
every shard to its server with ``isend`` the moment backward has produced all gradients the
piece covers, so the push overlaps backward. The worker then waits for its sends (push) and
for the fresh pieces (pull), which it asked for with ``irecv`` before the step started.
Exchanges with different servers run concurrently. With ``accumulation_steps`` K the
worker runs K micro-batches and the hooks push only from the last backward, when every
gradient holds the sum of the K (:mod:`scalelab.runner.accumulate`): one exchange per step.

Per server: it waits for piece i from every worker, sums in worker order (deterministic),
applies its own optimizer to the piece (it owns the momentum/Adam state; the fused step
divides the sum by W through ``grad_scale``, the same division as ``div_`` bit for bit
without a pass of its own) and sends the fresh piece to every worker at once, while later
pieces are still arriving.
With shards cut into pieces (``piece_bytes``) this is the full-duplex, pipelined form of
the exchange; with one piece per shard each server receives everything before it answers
(push then pull). ``RunConfig.exchange_form`` is the one statement of which holds.

Devices: servers always run on the CPU and every message goes over Gloo. Workers on a GPU
stage each piece through pinned host buffers (copy device->host after the gradient hook,
send once the copy's CUDA event is done; copy pulled pieces back to the device before the
next forward): :mod:`scalelab.runner.stage` gives the design and why NCCL is not used here.
The timers' phases mean the same on both devices (``push_s`` includes finishing the
device->host copies, ``pull_s`` the host->device ones: the step timer synchronizes the
device at every phase boundary).

Transport (``RunConfig.transport``): pieces travel over Gloo (``tcp``), or, when every rank
is on this host, through shared memory (``shm``, :mod:`scalelab.runner.shm`): the server's
parameters and the workers' gradient slots are shared buffers, and the messages above are
one-element tokens with the same tags, so the protocol and the arithmetic are unchanged.

Asynchronous (``mode="async"``): one message per shard. The server receives a gradient from
any worker, applies it as it arrives and answers that worker with the fresh shard. Staleness
of an update is the number of updates this server applied between sending that worker the
parameters it used and applying its gradient. At the end every server sends every worker
its final shard.
"""

from __future__ import annotations

import contextlib

import torch

from scalelab.runner import checkpoint
from scalelab.runner.accumulate import PeakMemory, accumulate
from scalelab.runner.comm import irecv, isend, wait
from scalelab.runner.compute import Computation
from scalelab.runner.config import RunConfig
from scalelab.runner.partition import Layout
from scalelab.runner.stage import Stager, pack
from scalelab.runner.timers import StepTimer, maybe_phase
from scalelab.workload import logits_of

TAG_ASYNC_GRAD = 1 << 20
TAG_FINAL = (1 << 20) + 1


def trainable(model) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


class Worker:
    """A worker on ``device``; its messages go through a :class:`scalelab.runner.stage.Stager`,
    or through shared memory with ``segments`` (:class:`scalelab.runner.shm.ShmStager`)."""

    def __init__(self, cfg: RunConfig, index: int, model, layout: Layout, shards, log,
                 device: torch.device | str = "cpu", segments=None):
        self.cfg, self.k, self.model, self.layout = cfg, index, model, layout
        self.shards, self.log = shards, log
        self.device = torch.device(device)
        self.comp = Computation(cfg.algorithm, self.device)  # the model is in its format
        self.params = trainable(model)
        self.loss_fn = cfg.workload.loss_fn()
        if segments is not None:
            from scalelab.runner.shm import ShmStager

            self.stager = ShmStager(layout.pieces, segments, index, self.params[0].dtype)
        else:
            self.stager = Stager(layout.pieces, self.params[0].dtype, self.device,
                                 cfg.stage_host)
        self.by_tensor: dict[int, list] = {}
        for piece in layout.pieces:
            for t in piece.tensors:
                self.by_tensor.setdefault(t, []).append(piece)
        self.pending: dict[int, int] = {}
        self.staged: list = []  # (piece, host tensor, event) waiting for their copies
        self.sends: list = []
        self.pulls: list = []
        self.capturing = False
        self.hooks = [p.register_post_accumulate_grad_hook(self._hook(t))
                      for t, p in enumerate(self.params)]
        self.elem_bytes = self.params[0].element_size()
        self.async_mode = cfg.mode == "async"
        self.held = 0  # > 0 inside a micro-batch that is not the step's last
        self.peak = PeakMemory(self.device, cfg.warmup_steps)

    def _hook(self, t: int):
        def hook(param):
            if not self.capturing:
                return
            for piece in self.by_tensor.get(t, ()):
                self.pending[piece.index] -= 1
                if self.pending[piece.index] == 0:
                    self._stage(piece)
            self._send_ready(block=False)
        return hook

    def _stage(self, piece) -> None:
        buf, event = self.stager.outgoing(piece, self.params)
        self.staged.append((piece, buf, event))
        # backward is done with these parameters: their fresh values may land
        self.pulls.append(self._post_pull(piece, piece.index))

    def _send_ready(self, block: bool) -> None:
        """isend the staged pieces whose copies are done, in staging order."""
        tag = TAG_ASYNC_GRAD if self.async_mode else None
        while self.staged:
            piece, buf, event = self.staged[0]
            if event is not None:
                if block:
                    event.synchronize()
                elif not event.query():
                    return
            self.staged.pop(0)
            server = self.cfg.server_rank(piece.server)
            self.sends.append((piece, isend(buf, server, piece.index if tag is None else tag)))

    def _post_pull(self, piece, tag: int):
        buf, buffered = self.stager.incoming(piece, self.params)
        return piece, irecv(buf, self.cfg.server_rank(piece.server), tag), buffered

    def _post_pulls(self, tag_of):
        return [self._post_pull(piece, tag_of(piece)) for piece in self.layout.pieces]

    def _finish_pulls(self, pulls, what: str) -> None:
        for piece, work, buffered in pulls:
            wait(work, self.cfg.timeout_s,
                 f"{what} piece {piece.index} from server {piece.server} "
                 f"(rank {self.cfg.server_rank(piece.server)})")
            if buffered:
                self.stager.land(piece, self.params)
        self.stager.landed()

    def initial_pull(self) -> None:
        self._finish_pulls(self._post_pulls(lambda p: p.index), "initial parameters")

    def step(self, step: int, timer: StepTimer | None) -> dict:
        cfg = self.cfg
        with maybe_phase(timer, "data_s"):
            x, y = self.shards.shard(step, self.k)  # on the device already (open_shards)
            x = self.comp.batch(x.to(self.device, non_blocking=True))
            y = y.to(self.device, non_blocking=True)
        self.stager.begin_step()
        self.pending = {p.index: len(p.tensors) for p in self.layout.pieces}
        self.staged, self.sends, self.pulls = [], [], []
        self.peak.at_step(step)
        self.model.zero_grad(set_to_none=True)
        k = cfg.accumulation_steps
        try:
            with maybe_phase(timer, "compute_s"):  # K micro-batches, pushed after the last
                loss = accumulate(k, x, y, self._forward_loss, lambda loss: loss.backward(),
                                  self._holding if k > 1 else None)
        finally:
            self.capturing = False
        missing = [p.index for p in self.layout.pieces if self.pending[p.index] != 0]
        if missing:
            raise RuntimeError(
                f"backward produced no gradient for some parameters (pieces {missing[:5]}); "
                "every parameter must be used in the loss"
            )
        with maybe_phase(timer, "push_s"):
            self._send_ready(block=True)
            for piece, work in self.sends:
                wait(work, cfg.timeout_s, f"the push of piece {piece.index} to server "
                     f"{piece.server} (rank {cfg.server_rank(piece.server)})")
        with maybe_phase(timer, "pull_s"):
            self._finish_pulls(self.pulls, "fresh parameters")
        ahead = getattr(self.shards, "prefetch", None)  # a GPU's next batch, copied meanwhile
        if ahead is not None:
            ahead(step + 1)
        nbytes = sum(p.numel for p in self.layout.pieces) * self.elem_bytes
        return {"loss": loss.detach(), "bytes_sent": nbytes, "bytes_received": nbytes,
                **self.stager.step_bytes()}

    def _forward_loss(self, x, y):
        self.capturing = self.held == 0  # the hooks push from the last backward only
        with self.comp.autocast():
            return self.loss_fn(logits_of(self.model(x)), y)

    @contextlib.contextmanager
    def _holding(self):
        """A micro-batch that is not the last: its gradients accumulate, nothing is sent."""
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1

    def final_pull(self) -> None:
        """Async only: the servers' final parameters after every worker's last update."""
        self._finish_pulls(self._post_pulls(lambda p: TAG_FINAL), "final parameters")

    def close(self) -> None:
        for h in self.hooks:
            h.remove()


class Server:
    """Server ``index``. With ``segment`` (:class:`scalelab.runner.shm.Segment`) its pieces and
    the workers' gradients live in shared memory and the messages are one-element tokens."""

    def __init__(self, cfg: RunConfig, index: int, model, layout: Layout, identity: dict, log,
                 segment=None):
        self.cfg, self.k, self.layout, self.identity, self.log = cfg, index, layout, identity, log
        params = trainable(model)
        dtype = params[0].dtype
        self.pieces = layout.pieces_of(index)
        self.order = layout.send_order(index)
        self.values: dict[int, torch.Tensor] = {}
        for piece in self.pieces:
            buf = (segment.value(piece) if segment is not None
                   else torch.empty(piece.numel, dtype=dtype))
            pack(piece, [p.detach() for p in params], buf)
            self.values[piece.index] = torch.nn.Parameter(buf)
        self.opts = {i: cfg.workload.make_optimizer([v], fused=True)
                     for i, v in self.values.items()}
        W = cfg.workers
        if W > 1:  # the fused step divides the summed gradient by W: one pass fewer than div_
            scale = torch.tensor(float(W))
            for opt in self.opts.values():
                opt.grad_scale = scale
        if segment is not None:
            self.recv = {(w, p.index): segment.grad(w, p) for w in range(W) for p in self.pieces}
            self.recv_msg = {(w, p.index): torch.zeros(1, dtype=dtype)
                             for w in range(W) for p in self.pieces}
            self.send_msg = {p.index: torch.zeros(1, dtype=dtype) for p in self.pieces}
        else:
            self.recv = {(w, p.index): torch.empty(p.numel, dtype=dtype)
                         for w in range(W) for p in self.pieces}
            self.recv_msg = self.recv
            self.send_msg = {i: v.detach() for i, v in self.values.items()}
        self.elem_bytes = params[0].element_size()
        self.shard_bytes = sum(p.numel for p in self.pieces) * self.elem_bytes

    # -- checkpoints ----------------------------------------------------------------------
    def state(self, step: int) -> dict:
        return {"identity": self.identity, "step": step,
                "pieces": {str(i): v.detach().clone() for i, v in self.values.items()},
                "optimizers": {str(i): o.state_dict() for i, o in self.opts.items()}}

    def load(self, payload: dict) -> None:
        with torch.no_grad():
            for i, v in self.values.items():
                v.copy_(payload["pieces"][str(i)])
        for i, o in self.opts.items():
            o.load_state_dict(payload["optimizers"][str(i)])

    def _send_all(self, tag_of) -> list:
        works = []
        for piece in self.pieces:
            for w in range(self.cfg.workers):
                works.append((w, isend(self.send_msg[piece.index],
                                       self.cfg.worker_rank(w), tag_of(piece))))
        return works

    def _wait_sends(self, works, what: str) -> None:
        for w, work in works:
            wait(work, self.cfg.timeout_s,
                 f"{what} to worker {w} (rank {self.cfg.worker_rank(w)})")

    def initial_push(self) -> None:
        self._wait_sends(self._send_all(lambda p: p.index), "sending initial parameters")

    def step_sync(self, step: int, timer: StepTimer | None) -> dict:
        cfg, W = self.cfg, self.cfg.workers
        works = {(w, p.index): irecv(self.recv_msg[(w, p.index)], cfg.worker_rank(w), p.index)
                 for w in range(W) for p in self.pieces}
        sends = []
        for piece in self.order:
            i = piece.index
            with maybe_phase(timer, "recv_s"):
                for w in range(W):
                    wait(works[(w, i)], cfg.timeout_s,
                         f"the gradient piece {i} from worker {w} (rank {cfg.worker_rank(w)})")
            with maybe_phase(timer, "apply_s"):
                g = self.recv[(0, i)]  # summed in place, in worker order
                for w in range(1, W):
                    g.add_(self.recv[(w, i)])
                self.values[i].grad = g  # the step divides it by W (grad_scale)
                self.opts[i].step()
            for w in range(W):
                sends.append((w, isend(self.send_msg[i], cfg.worker_rank(w), i)))
        with maybe_phase(timer, "send_s"):
            self._wait_sends(sends, "sending fresh parameters")
        return {"bytes_received": self.shard_bytes * W, "bytes_sent": self.shard_bytes * W}

    def run_async(self, total_updates: int, record) -> dict:
        """Apply ``total_updates`` gradients as they arrive; ``record(step_record)`` per update."""
        cfg = self.cfg
        (piece,) = self.pieces if len(self.pieces) == 1 else (None,)
        assert piece is not None, "async servers hold one piece"
        i = piece.index
        rbuf = torch.empty(piece.numel, dtype=self.values[i].dtype)
        sendbuf = {w: torch.empty_like(rbuf) for w in range(cfg.workers)}
        pending_send: dict[int, object] = {}
        sent_version = dict.fromkeys(range(cfg.workers), 0)
        version = 0
        staleness = []
        for update in range(total_updates):
            timer = StepTimer()
            timer.start_step()
            with timer.phase("recv_s"):
                work = irecv(rbuf, None, TAG_ASYNC_GRAD)
                wait(work, cfg.timeout_s, "a gradient from any worker")
                src = work._source_rank()
            _, w = cfg.role_of(src)
            with timer.phase("apply_s"):
                self.values[i].grad = rbuf
                self.opts[i].step()
                stale = version - sent_version[w]
                version += 1
            with timer.phase("send_s"):
                if w in pending_send:
                    wait(pending_send.pop(w), cfg.timeout_s,
                         f"sending parameters to worker {w} (rank {src})")
                sendbuf[w].copy_(self.values[i].detach())
                pending_send[w] = isend(sendbuf[w], src, i)
                sent_version[w] = version
            rec = timer.end_step()
            staleness.append(stale)
            record({**rec, "step": update, "worker": w, "staleness": stale,
                    "bytes_received": self.shard_bytes, "bytes_sent": self.shard_bytes})
        for w, work in pending_send.items():
            wait(work, cfg.timeout_s, f"sending parameters to worker {w}")
        self._wait_sends(self._send_all(lambda p: TAG_FINAL), "sending final parameters")
        return {"staleness_mean": sum(staleness) / len(staleness) if staleness else 0.0,
                "staleness_max": max(staleness, default=0), "updates": total_updates}


def save_checkpoint(server: Server, step: int) -> None:
    checkpoint.save(server.cfg.checkpoint_dir, f"ps{server.k}", step, server.state(step))
