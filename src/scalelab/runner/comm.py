"""Point-to-point messages with a deadline: a dead or hung peer becomes an error, not a hang."""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist


class CommError(RuntimeError):
    """Waiting on a peer failed (it died, closed the connection, or did not answer in time)."""


def wait(work, timeout_s: float, what: str) -> None:
    try:
        ok = work.wait(timeout=timedelta(seconds=timeout_s))
    except RuntimeError as e:
        text = " ".join(str(e).split())
        if "timed out" in text.lower() or "timeout" in text.lower():
            raise CommError(f"no answer within {timeout_s:g} s while waiting for {what}") from None
        raise CommError(f"lost {what}: {text[:200]}") from None
    if ok is False:
        raise CommError(f"no answer within {timeout_s:g} s while waiting for {what}")


def isend(tensor, dst: int, tag: int):
    return dist.isend(tensor, dst=dst, tag=tag)


def irecv(tensor, src: int | None, tag: int):
    return dist.irecv(tensor, src=src, tag=tag)
