"""The parameter-server exchange through shared memory, for servers on their workers' host.

Over Gloo a piece crosses loopback TCP: the kernel copies it out of the sender and into the
receiver, and on the CPU those copies run on the cores the workers' backward needs (32 to
43 ms of CPU per 64 MiB moved, per side, on the two cores here: README). When every rank
is on one host, the bytes need not move at all. ``RunConfig.transport = "shm"`` puts them
in shared memory instead, as parameter-server systems do for a worker and a server on the
same machine: BytePS's transport (github.com/bytedance/ps-lite, ``src/rdma_van.h``) gives
an endpoint on the same hostname an ``IPCTransport`` instead of RDMA when
``BYTEPS_ENABLE_IPC=1``, off by default, as here (BytePS 0.2.0's changelog: "Add IPC
support ... colocating servers and workers without sacrificing much performance").

Per server k one file in ``/dev/shm`` holds ``1 + W`` buffers of its shard's size: the
server's parameters (its optimizer updates them in place) and one gradient slot per worker.
A piece is the same ``[offset, offset + numel)`` of each buffer. The protocol of
:mod:`scalelab.runner.ps` is unchanged; only what a message carries changes:

- push: the worker packs the piece's gradients into its slot (one copy) and sends a
  one-element token with the piece's tag over Gloo. The server, once it has every
  worker's token for the piece, sums the slots in worker order, divides by W and applies
  its optimizer to its shared parameters: the same operations as over TCP, so the same
  bits.
- pull: the server sends each worker a token; the worker copies the piece from the
  server's parameters into its own (one copy).

Races cannot happen in a synchronous step: a worker writes its slot for step s+1 only after
it has copied the fresh piece of step s, which the server sent after reading the slot of
step s; the server writes its parameters for step s+1 only after every worker has sent
its token of step s+1, which each sent after copying the parameters of step s.

Only for synchronous runs on CPU workers started by the local launcher without an
emulated network: every rank is then a process of this host. Ranks on other nodes
(torchrun) or in emulated hosts (network namespaces, where the link is the point) keep
TCP, and so do GPU workers, which stage through pinned buffers (:mod:`scalelab.runner.stage`).
``config.transport`` in run.json says which one carried the bytes.

The files are made by the servers, mapped by every worker, and unlinked by their server as
soon as every rank has mapped them (two barriers), so nothing is left behind in
``/dev/shm`` once the mapping is up, whatever happens to the job later.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import torch
import torch.distributed as dist

from scalelab.runner.stage import pack, unpack

SHM_DIR = Path("/dev/shm")


def _path(token: str, server: int) -> Path:
    return SHM_DIR / f"scalelab-{token}-ps{server}"


def _map(path: Path, numel: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_file(str(path), shared=True, size=numel, dtype=dtype)


class Segment:
    """Server k's shared buffers: its parameters and one gradient slot per worker."""

    def __init__(self, flat: torch.Tensor, shard_numel: int, workers: int):
        self.flat = flat
        self.values = flat[:shard_numel]
        self.grads = [flat[(1 + w) * shard_numel:(2 + w) * shard_numel] for w in range(workers)]

    def value(self, piece) -> torch.Tensor:
        return self.values[piece.offset:piece.offset + piece.numel]

    def grad(self, worker: int, piece) -> torch.Tensor:
        return self.grads[worker][piece.offset:piece.offset + piece.numel]


def open_segments(cfg, role: str, index: int, layout, dtype: torch.dtype) -> dict[int, Segment]:
    """Every rank calls this together: servers make their files, every rank maps the ones it
    needs (a server its own, a worker every server's), then the files are unlinked.

    Returns ``{server: Segment}``.
    """
    token = [uuid.uuid4().hex if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(token, src=0)
    W = cfg.workers
    numel = {k: layout.shard_numel(k) for k in range(layout.num_servers)}
    mine = [index] if role == "server" else list(range(layout.num_servers))
    path = _path(token[0], index)
    try:
        if role == "server":
            with open(path, "wb") as f:
                f.truncate((1 + W) * numel[index] * torch.empty((), dtype=dtype).element_size())
        dist.barrier()  # every file exists
        segments = {k: Segment(_map(_path(token[0], k), (1 + W) * numel[k], dtype), numel[k], W)
                    for k in mine}
        dist.barrier()  # every rank has mapped what it needs
    finally:
        if role == "server":
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    return segments


class ShmStager:
    """A CPU worker's side of the exchange through shared memory, with
    :class:`scalelab.runner.stage.Stager`'s interface: what goes to ``isend``/``irecv`` is a
    one-element token; the piece itself is packed into this worker's slot and unpacked from
    its server's parameters."""

    staged = False

    def __init__(self, pieces, segments: dict[int, Segment], worker: int, dtype: torch.dtype):
        self.segments, self.worker = segments, worker
        self.out_token = {p.index: torch.zeros(1, dtype=dtype) for p in pieces}
        self.in_token = {p.index: torch.zeros(1, dtype=dtype) for p in pieces}

    def begin_step(self) -> None:
        return None

    def outgoing(self, piece, params):
        pack(piece, [p.grad for p in params], self.segments[piece.server].grad(self.worker, piece))
        return self.out_token[piece.index], None

    def incoming(self, piece, params) -> tuple[torch.Tensor, bool]:
        return self.in_token[piece.index], True

    def land(self, piece, params) -> None:
        unpack(piece, self.segments[piece.server].value(piece), params)

    def landed(self) -> None:
        return None

    def step_bytes(self) -> dict[str, int]:
        return {}
