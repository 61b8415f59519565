"""Which device each rank trains on, and which torch.distributed backend joins the job.

The rule, in one pure function (:func:`assign`), tested on CPU with made-up device counts:

- ``device="cpu"``: every rank on the CPU, Gloo.
- ``device="cuda"``, all-reduce: every rank a worker on its own GPU, NCCL. A rank's GPU is
  its position among the workers of its host: under torchrun that is ``LOCAL_RANK`` (ranks
  are assigned node-major, so a host's ranks are ``rank - LOCAL_RANK ...``); under the local
  launcher worker k is on GPU k. Two NCCL ranks never share a GPU (NCCL refuses to run two
  ranks of one communicator on one device), so a host with more workers than GPUs is
  refused in one line.
- ``device="cuda"``, parameter server: workers on GPU ``(their position among this host's
  workers) mod (GPUs on the host)``, servers on the CPU, and Gloo for every message (the
  workers stage the exchange through pinned host memory, see :mod:`scalelab.runner.stage`).
  Gloo has no objection to two workers sharing a GPU, so wrapping around is allowed.

None of the CUDA paths here have run on a GPU in this project's tests; their logic is tested
with device counts given as numbers, and ``gpu``-marked tests exercise them where CUDA is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scalelab.errors import UsageError

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class RankDevice:
    """Where one rank runs: ``device`` is ``"cpu"`` or ``"cuda:<index>"``."""

    device: str
    backend: str  # "gloo" or "nccl"
    cuda_index: int | None = None  # the GPU index, None on the CPU

    def __post_init__(self):
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be gloo or nccl, got {self.backend!r}")
        if (self.cuda_index is None) != (self.device == "cpu"):
            raise ValueError(f"device {self.device!r} and GPU index {self.cuda_index} disagree")

    @property
    def is_cuda(self) -> bool:
        return self.cuda_index is not None


def default_device() -> str:
    """``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> str:
    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r} (cpu or cuda)")
    return device


def local_worker_position(rank: int, local_rank: int, is_worker: Callable[[int], bool]) -> int:
    """How many workers of this host come before ``rank`` (the host's ranks are contiguous).

    torchrun gives a host the global ranks ``rank - LOCAL_RANK`` to
    ``rank - LOCAL_RANK + LOCAL_WORLD_SIZE - 1``; the local launcher runs every rank on one
    host with ``LOCAL_RANK = RANK``.
    """
    if not 0 <= local_rank <= rank:
        raise UsageError(f"LOCAL_RANK {local_rank} does not fit RANK {rank} "
                         "(need 0 <= LOCAL_RANK <= RANK)")
    return sum(1 for r in range(rank - local_rank, rank) if is_worker(r))


def assign(device: str, architecture: str, role: str, rank: int, local_rank: int,
           is_worker: Callable[[int], bool], device_count: int) -> RankDevice:
    """The device and backend of ``rank``; UsageError when the placement cannot work.

    ``device_count``: GPUs this host's process sees (``torch.cuda.device_count()``).
    """
    check_device(device)
    if device == "cpu":
        return RankDevice("cpu", "gloo")
    if device_count < 1:
        raise UsageError(f"--device cuda: rank {rank} sees no CUDA device "
                         "(torch.cuda.device_count() is 0); use --device cpu")
    nccl = architecture in ("allreduce", "fsdp")
    if role != "worker":
        return RankDevice("cpu", "gloo")  # servers stay on the CPU
    position = local_worker_position(rank, local_rank, is_worker)
    if nccl and position >= device_count:
        raise UsageError(
            f"--device cuda with all-reduce needs one GPU per rank: rank {rank} is worker "
            f"{position + 1} of its host, which has {device_count} GPU(s); two NCCL ranks "
            "never share a GPU (use fewer workers per host or --device cpu)")
    index = position % device_count
    return RankDevice(f"cuda:{index}", "nccl" if nccl else "gloo", index)


def for_rank(cfg, rank: int, local_rank: int, device_count: int) -> RankDevice:
    """:func:`assign` for a rank of the run ``cfg`` (a RunConfig)."""
    role, _ = cfg.role_of(rank)
    return assign(cfg.device, cfg.architecture, role, rank, local_rank,
                  lambda r: cfg.role_of(r)[0] == "worker", device_count)


def check_local(cfg, device_count: int) -> None:
    """Refuse, before starting anything, a local-launcher run no rank could place."""
    for r in range(cfg.world_size):
        for_rank(cfg, r, r, device_count)
