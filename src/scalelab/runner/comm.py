"""Point-to-point messages with a timeout on every wait, and failures that name the peer."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist


class PeerError(RuntimeError):
    """A wait on ``peer`` (a global rank) failed or timed out."""

    def __init__(self, peer: int, message: str):
        super().__init__(message)
        self.peer = peer


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def wait(work, peer: int, what: str, timeout_s: float) -> None:
    try:
        ok = work.wait(timeout=timedelta(seconds=timeout_s))
    except RuntimeError as e:
        if "imed out" in str(e) or "imeout" in str(e):
            raise PeerError(peer, f"timed out after {timeout_s:g} s waiting for {what}") from None
        raise PeerError(peer, f"{what} failed: {_one_line(e)}") from None
    if ok is False:
        raise PeerError(peer, f"timed out after {timeout_s:g} s waiting for {what}")


def isend(t: torch.Tensor, dst: int, tag: int):
    return dist.isend(t, dst=dst, tag=tag)


def irecv(t: torch.Tensor, src: int | None, tag: int):
    return dist.irecv(t, src=src, tag=tag)


def param_checksum(params) -> float:
    """float64 sum of squares of all parameters."""
    return float(sum(p.detach().double().pow(2).sum() for p in params))
