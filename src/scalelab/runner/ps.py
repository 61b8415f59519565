"""The sharded parameter server: worker and server loops, synchronous and asynchronous.

Messages are point-to-point ``isend``/``irecv`` on Gloo. With ``NP`` pieces in the partition,
tag ``j`` carries piece j's gradient (worker -> server) and tag ``NP + j`` its fresh
parameters (server -> worker).

Synchronous: at the start every server sends its shard to every worker. Each step a worker
runs forward and backward; a post-accumulate-grad hook copies each gradient into a flat
buffer and, once every tensor of a piece is done, sends that piece to its server and posts
the receive of its fresh values, so the push overlaps the rest of backward (``overlap``;
without it pieces go out after backward). Exchanges with different servers run concurrently.
A server receives piece j from all W workers, averages, applies its optimizer (it owns the
momentum/Adam state of its shard, one optimizer per piece, elementwise identical to one
optimizer over the model) and sends piece j back, piece by piece.

Asynchronous: a worker sends its whole shard to each server after backward; a server
receives from any source, applies that gradient at once (no averaging) and answers that
worker with its current shard; staleness is the number of updates the server applied since
that worker last pulled. After every update a final copy goes to every worker.
"""

from __future__ import annotations

import torch
from torch import nn

from scalelab.errors import UsageError
from scalelab.runner import checkpoint
from scalelab.runner.comm import irecv, isend, param_checksum, wait
from scalelab.runner.data import make_data
from scalelab.runner.partition import Partition, make_partition
from scalelab.runner.timers import maybe_phase
from scalelab.workload import logits_of


def flatten_model(model: nn.Module) -> tuple[list[nn.Parameter], torch.Tensor]:
    """Make every parameter a view of one flat tensor; returns (params, flat)."""
    params = [p for p in model.parameters() if p.requires_grad]
    dtypes = {p.dtype for p in params}
    if len(dtypes) != 1:
        raise UsageError(f"the parameter server needs one parameter dtype, found {dtypes}")
    flat = torch.cat([p.detach().reshape(-1) for p in params]).contiguous()
    off = 0
    for p in params:
        n = p.numel()
        p.data = flat[off:off + n].view_as(p)
        off += n
    return params, flat


def partition_for(config, params) -> Partition:
    elem = params[0].element_size()
    piece = max(1, config.piece_bytes // elem) if config.piece_bytes else None
    return make_partition([p.numel() for p in params], config.ps, config.partition, piece)


class _Tags:
    def __init__(self, num_pieces: int):
        self.np = num_pieces

    def grad(self, j):
        return j

    def param(self, j):
        return self.np + j

    @property
    def async_grad(self):
        return 2 * self.np

    @property
    def async_param(self):
        return 2 * self.np + 1

    @property
    def final(self):
        return 2 * self.np + 2


def run_worker(ctx) -> dict:
    cfg, k = ctx.config, ctx.index
    spec = cfg.workload
    model = spec.build_model(cfg.seed)
    model.train()
    params, flat = flatten_model(model)
    part = partition_for(cfg, params)
    tags = _Tags(len(part.pieces))
    srank = [cfg.server_rank(p.server) for p in part.pieces]
    offsets = part.offsets
    grad_flat = torch.zeros_like(flat)
    loss_fn = spec.loss_fn()
    data = make_data(cfg)
    timeout = cfg.timeout_s
    pieces_of = part.pieces_of_tensor()

    def desc(r):
        return cfg.describe_rank(r)

    # Initial pull: the servers' shards are the starting point (fresh or resumed).
    works = [(irecv(flat[p.start:p.end], srank[p.index], tags.param(p.index)), p)
             for p in part.pieces]
    for w, p in works:
        wait(w, srank[p.index], f"initial parameters from {desc(srank[p.index])}", timeout)

    server_views = []
    for s in range(cfg.ps):
        mine = part.server_pieces(s)
        server_views.append(mine)

    state = {"remaining": None, "fired": None, "sends": [], "recvs": [], "first_send": None}
    overlap = cfg.overlap and cfg.mode == "sync"

    def send_piece(j):
        p = part.pieces[j]
        if state["first_send"] is None:
            state["first_send"] = ctx.now()
        state["sends"].append((isend(grad_flat[p.start:p.end], srank[j], tags.grad(j)), j))
        state["recvs"].append((irecv(flat[p.start:p.end], srank[j], tags.param(j)), j))

    def on_grad(t):
        def hook(param):
            g = param.grad
            grad_flat[offsets[t]:offsets[t + 1]].copy_(g.reshape(-1))
            param.grad = None
            state["fired"][t] = True
            for j in pieces_of[t]:
                state["remaining"][j] -= 1
                if state["remaining"][j] == 0 and overlap:
                    send_piece(j)
        return hook

    handles = [p.register_post_accumulate_grad_hook(on_grad(t)) for t, p in enumerate(params)]
    elem = flat.element_size()
    total = cfg.steps - cfg.start_step
    try:
        for step in range(cfg.start_step, cfg.steps):
            timer = ctx.timer
            timer.start(step)
            with maybe_phase(timer, "data_s"):
                x, y = data.batch(step, k)
            state.update(remaining=[len(p.tensors) for p in part.pieces],
                         fired=[False] * len(params), sends=[], recvs=[], first_send=None)
            with maybe_phase(timer, "compute_s"):
                loss = loss_fn(logits_of(model(x)), y)
                loss.backward()
                for t, fired in enumerate(state["fired"]):
                    if not fired:  # a parameter without gradient this step: send zeros
                        grad_flat[offsets[t]:offsets[t + 1]].zero_()
                        for j in pieces_of[t]:
                            state["remaining"][j] -= 1
                            if state["remaining"][j] == 0 and overlap:
                                send_piece(j)
            t_push = ctx.now()
            if cfg.mode == "sync":
                if not overlap:
                    for j in reversed(range(len(part.pieces))):
                        send_piece(j)
                with maybe_phase(timer, "push_s"):
                    for w, j in state["sends"]:
                        wait(w, srank[j], f"push of piece {j} to {desc(srank[j])}", timeout)
                with maybe_phase(timer, "pull_s"):
                    for w, j in state["recvs"]:
                        wait(w, srank[j], f"pull of piece {j} from {desc(srank[j])}", timeout)
            else:
                _async_exchange(ctx, part, server_views, grad_flat, flat, tags, timer)
            first = state["first_send"] if state["first_send"] is not None else t_push
            ctx.step_done(exchange_s=ctx.now() - first, loss=float(loss.detach()))
            ctx.progress(step + 1 - cfg.start_step, total)
        if cfg.mode == "async":
            bufs = _recv_final(ctx, part, server_views, flat, tags)
            del bufs
    finally:
        for h in handles:
            h.remove()
    result = {
        "bytes": {"push_bytes": flat.numel() * elem, "pull_bytes": flat.numel() * elem},
        "partition": part.describe(),
    }
    if k == 0:
        result["final_param_checksum"] = param_checksum(params)
        if cfg.final_params_path:
            ctx.save_tensor(cfg.final_params_path, flat)
    return result


def _pack(views_of_server, src: torch.Tensor) -> torch.Tensor:
    if len(views_of_server) == 1:
        p = views_of_server[0]
        return src[p.start:p.end]
    return torch.cat([src[p.start:p.end] for p in views_of_server])


def _unpack(views_of_server, buf: torch.Tensor, dst: torch.Tensor) -> None:
    off = 0
    for p in views_of_server:
        dst[p.start:p.end].copy_(buf[off:off + p.numel])
        off += p.numel


def _async_exchange(ctx, part, server_views, grad_flat, flat, tags, timer):
    cfg = ctx.config
    sends, recvs = [], []
    for s, views in enumerate(server_views):
        r = cfg.server_rank(s)
        out = _pack(views, grad_flat)
        buf = torch.empty(sum(p.numel for p in views), dtype=flat.dtype)
        sends.append((isend(out, r, tags.async_grad), r))
        recvs.append((irecv(buf, r, tags.async_param), r, buf, views))
    with maybe_phase(timer, "push_s"):
        for w, r in sends:
            wait(w, r, f"push to {cfg.describe_rank(r)}", cfg.timeout_s)
    with maybe_phase(timer, "pull_s"):
        for w, r, buf, views in recvs:
            wait(w, r, f"pull from {cfg.describe_rank(r)}", cfg.timeout_s)
            _unpack(views, buf, flat)


def _recv_final(ctx, part, server_views, flat, tags):
    cfg = ctx.config
    bufs = []
    for s, views in enumerate(server_views):
        r = cfg.server_rank(s)
        buf = torch.empty(sum(p.numel for p in views), dtype=flat.dtype)
        bufs.append((irecv(buf, r, tags.final), r, buf, views))
    for w, r, buf, views in bufs:
        wait(w, r, f"final parameters from {cfg.describe_rank(r)}", cfg.timeout_s)
        _unpack(views, buf, flat)
    return bufs


def run_server(ctx) -> dict:
    cfg, k = ctx.config, ctx.index
    spec = cfg.workload
    model = spec.build_model(cfg.seed)
    params, flat = flatten_model(model)
    shapes = [tuple(p.shape) for p in params]
    part = partition_for(cfg, params)
    tags = _Tags(len(part.pieces))
    mine = part.server_pieces(k)
    shard = [nn.Parameter(flat[p.start:p.end].clone()) for p in mine]
    opts = [spec.make_optimizer([t]) for t in shard]
    del model, params, flat
    if cfg.start_step:
        st = checkpoint.load(cfg.checkpoint_dir, f"server-{k}", cfg.start_step)
        with torch.no_grad():
            for t, saved in zip(shard, st["pieces"], strict=True):
                t.copy_(saved)
        for o, s in zip(opts, st["optimizers"], strict=True):
            o.load_state_dict(s)
    wranks = [cfg.worker_rank(w) for w in range(cfg.workers)]
    timeout = cfg.timeout_s
    numel = sum(p.numel for p in mine)
    elem = shard[0].element_size()

    def desc(r):
        return cfg.describe_rank(r)

    works = [(isend(t.data, r, tags.param(p.index)), r)
             for r in wranks for p, t in zip(mine, shard, strict=True)]
    for w, r in works:
        wait(w, r, f"initial send to {desc(r)}", timeout)

    ident = checkpoint.identity(cfg, shapes)
    if cfg.mode == "sync":
        _serve_sync(ctx, mine, shard, opts, wranks, tags, ident)
        staleness = None
    else:
        staleness = _serve_async(ctx, mine, shard, opts, wranks, tags)
    result = {
        "bytes": {"recv_bytes": cfg.workers * numel * elem,
                  "send_bytes": cfg.workers * numel * elem,
                  "shard_bytes": numel * elem},
        "shard_checksum": param_checksum(shard),
    }
    if staleness is not None:
        result["staleness"] = staleness
    return result


def _serve_sync(ctx, mine, shard, opts, wranks, tags, ident):
    cfg, k = ctx.config, ctx.index
    W = len(wranks)
    timeout = cfg.timeout_s
    bufs = [[torch.empty_like(t.data) for t in shard] for _ in wranks]
    order = list(reversed(range(len(mine))))  # backward produces the last tensors first
    total = cfg.steps - cfg.start_step
    for step in range(cfg.start_step, cfg.steps):
        timer = ctx.timer
        timer.start(step)
        recvs = [[irecv(bufs[w][i], wranks[w], tags.grad(p.index)) for i, p in enumerate(mine)]
                 for w in range(W)]
        sends = []
        for i in order:
            p = mine[i]
            with maybe_phase(timer, "wait_s"):
                for w in range(W):
                    wait(recvs[w][i], wranks[w],
                         f"gradient piece {p.index} from {cfg.describe_rank(wranks[w])}", timeout)
            with maybe_phase(timer, "apply_s"):
                g = bufs[0][i].clone()
                for w in range(1, W):
                    g.add_(bufs[w][i])
                g.div_(W)
                shard[i].grad = g
                opts[i].step()
                shard[i].grad = None
            sends += [(isend(shard[i].data, r, tags.param(p.index)), r) for r in wranks]
        with maybe_phase(timer, "send_s"):
            for w, r in sends:
                wait(w, r, f"parameters to {cfg.describe_rank(r)}", timeout)
        done = step + 1
        if cfg.checkpoint_every and done % cfg.checkpoint_every == 0:
            with maybe_phase(timer, "checkpoint_s"):
                checkpoint.save(cfg.checkpoint_dir, f"server-{k}", done, {
                    "identity": ident, "step": done,
                    "pieces": [t.detach().clone() for t in shard],
                    "optimizers": [o.state_dict() for o in opts],
                })
        ctx.step_done()
        ctx.progress(done - cfg.start_step, total)


def _serve_async(ctx, mine, shard, opts, wranks, tags) -> list[int]:
    cfg = ctx.config
    timeout = cfg.timeout_s
    numel = sum(t.numel() for t in shard)
    buf = torch.empty(numel, dtype=shard[0].dtype)
    index_of = {r: w for w, r in enumerate(wranks)}
    version, pulled = 0, [0] * len(wranks)
    pending = {}
    staleness = []
    total = len(wranks) * (cfg.steps - cfg.start_step)

    def current():
        return torch.cat([t.detach().reshape(-1) for t in shard])

    for n in range(total):
        timer = ctx.timer
        timer.start(n)
        with maybe_phase(timer, "wait_s"):
            work = irecv(buf, None, tags.async_grad)
            wait(work, -1, "a gradient from any worker", timeout)
            src = work._source_rank()
        w = index_of[src]
        staleness.append(version - pulled[w])
        with maybe_phase(timer, "apply_s"):
            off = 0
            for t, o in zip(shard, opts, strict=True):
                t.grad = buf[off:off + t.numel()].view_as(t).clone()
                off += t.numel()
                o.step()
                t.grad = None
        version += 1
        if src in pending:
            wait(pending[src], src, f"parameters to {cfg.describe_rank(src)}", timeout)
        pending[src] = isend(current(), src, tags.async_param)
        pulled[w] = version
        ctx.step_done(worker=w, staleness=staleness[-1])
    for src, work in pending.items():
        wait(work, src, f"parameters to {cfg.describe_rank(src)}", timeout)
    final = current()
    works = [(isend(final, r, tags.final), r) for r in wranks]
    for work, r in works:
        wait(work, r, f"final parameters to {cfg.describe_rank(r)}", timeout)
    return staleness
