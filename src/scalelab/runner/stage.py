"""Where a parameter-server worker's messages live: in place, or staged through host memory.

Parameter servers stay on the CPU and every message goes over Gloo, whatever the workers'
device. NCCL would not do: it ignores tags, has no receive-from-any-source (the asynchronous
server needs one), and runs the operations to one peer in order, so the hook-driven
protocol of :mod:`scalelab.runner.ps` would mis-deliver or deadlock on it.

A worker on a GPU therefore stages its exchange through pinned host buffers, one per piece
and direction, allocated once:

- push: when backward has produced every gradient of a piece, the gradient hook copies the
  piece into its pinned buffer (``non_blocking`` device-to-host copies on the current
  stream, which orders them after the kernels that produced the gradients) and records a
  CUDA event after them. The buffer goes to ``isend`` only once that event has completed:
  at a later hook if the event is done by then, at the latest when backward has returned.
- pull: the fresh piece arrives by ``irecv`` into its pinned buffer; once it is there it is
  copied to the parameters on the device (``non_blocking``, on the stream the next forward
  runs on, so the forward sees it), and an event is recorded after those copies. The next
  step waits for that event before any receive may overwrite the buffers.

Pieces cover tensors in memory order (:func:`scalelab.runner.compute.flat`: NHWC for a
channels_last weight). On the CPU without staging a piece that is one slice of one tensor
is sent and received in place (zero copy), otherwise packed into a preallocated buffer. With
``staged=True`` on the CPU the staging path runs as on a GPU, with plain copies into the
preallocated buffers and no events: that is how its byte accounting is tested here. The
CUDA branch (pinned buffers, events, ``non_blocking`` copies) has not run on a GPU in this
project's CPU tests; ``gpu``-marked tests cover it where CUDA is present.
"""

from __future__ import annotations

import torch

from scalelab.runner.compute import flat


def pack(piece, tensors, out: torch.Tensor, non_blocking: bool = False) -> None:
    """Copy the slices ``piece`` covers of ``tensors`` into ``out`` (the piece's buffer)."""
    for t, a, b, o in piece.copies:
        out[o - piece.offset:o - piece.offset + (b - a)].copy_(
            flat(tensors[t])[a:b], non_blocking=non_blocking)


def unpack(piece, buf: torch.Tensor, params, non_blocking: bool = False) -> None:
    """Copy the piece's buffer back into the slices of ``params`` it covers."""
    with torch.no_grad():
        for t, a, b, o in piece.copies:
            flat(params[t])[a:b].copy_(buf[o - piece.offset:o - piece.offset + (b - a)],
                                       non_blocking=non_blocking)


def _direct(piece, tensor: torch.Tensor) -> torch.Tensor | None:
    """A zero-copy view for a piece that is one slice of one dense tensor."""
    if len(piece.copies) != 1:
        return None
    _, a, b, _ = piece.copies[0]
    try:
        return flat(tensor)[a:b]
    except ValueError:
        return None


class Stager:
    """The host side of one worker's exchange, and the bytes it moved across the host link."""

    def __init__(self, pieces, dtype: torch.dtype, device: torch.device, staged: bool):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and not staged:
            raise ValueError("a worker on a GPU must stage its exchange through host memory")
        self.staged = staged
        pin = self.cuda
        self.grad_host = {p.index: torch.empty(p.numel, dtype=dtype, pin_memory=pin)
                          for p in pieces}
        self.param_host = {p.index: torch.empty(p.numel, dtype=dtype, pin_memory=pin)
                           for p in pieces}
        self.elem_bytes = torch.empty((), dtype=dtype).element_size()
        self.d2h_bytes = 0  # staged device->host bytes since the last begin_step
        self.h2d_bytes = 0
        self._landed = None  # event after the last host->device copies

    def begin_step(self) -> None:
        """Reset the byte counts; the receive buffers are free once the last copies ran."""
        if self._landed is not None:
            self._landed.synchronize()
            self._landed = None
        self.d2h_bytes = self.h2d_bytes = 0

    def outgoing(self, piece, params):
        """``(host tensor to send, event or None)`` for the gradient of ``piece``.

        With an event, the tensor may be sent only once ``event.query()`` is true (or after
        ``event.synchronize()``).
        """
        grads = [p.grad for p in params]
        if not self.staged:
            buf = _direct(piece, grads[piece.copies[0][0]])
            if buf is None:
                buf = self.grad_host[piece.index]
                pack(piece, grads, buf)
            return buf, None
        buf = self.grad_host[piece.index]
        pack(piece, grads, buf, non_blocking=self.cuda)
        self.d2h_bytes += piece.numel * self.elem_bytes
        if not self.cuda:
            return buf, None
        event = torch.cuda.Event()
        event.record()
        return buf, event

    def incoming(self, piece, params) -> tuple[torch.Tensor, bool]:
        """``(tensor to receive into, whether it must be landed)`` for the fresh ``piece``."""
        if not self.staged:
            target = _direct(piece, params[piece.copies[0][0]].data)
            if target is not None:
                return target, False
        return self.param_host[piece.index], True

    def land(self, piece, params) -> None:
        """Copy a received piece from its host buffer into the parameters."""
        unpack(piece, self.param_host[piece.index], params, non_blocking=self.cuda)
        if self.staged:
            self.h2d_bytes += piece.numel * self.elem_bytes

    def landed(self) -> None:
        """Every received piece of this round has been landed (queued, on a GPU)."""
        if self.cuda:
            self._landed = torch.cuda.Event()
            self._landed.record()

    def step_bytes(self) -> dict[str, int]:
        """Staged bytes of this step for the step record (nothing when not staging)."""
        if not self.staged:
            return {}
        return {"bytes_staged_d2h": self.d2h_bytes, "bytes_staged_h2d": self.h2d_bytes}
