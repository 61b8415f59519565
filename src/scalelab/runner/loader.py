"""Loader processes: each worker reads its image-folder shards through a DataLoader.

Worker k of W at per-worker batch b trains step s on dataset indices
``ImageFolderShards.indices(s, k)`` (samples ``[k*b, (k+1)*b)`` of the global batch), so
parameter servers, DDP and one process at batch W*b see the same samples whatever the
loader count. A batch sampler yields those index lists for steps ``start, start+1, ...,
steps-1`` in order; ``torch.utils.data.DataLoader`` with ``L`` processes decodes them ahead
of the step (``PREFETCH_FACTOR`` batches per process), in pinned memory when the device is
a GPU. ``L = 0`` decodes in the training process, on the step's critical path.

One DataLoader iterator serves the whole run, so there is nothing to keep between epochs
(no persistent workers) and a run resumed at step s starts its sampler at s: the same
batches as the run that was interrupted. Asking for a step out of order (never done by the
runner) restarts the iterator at that step. :meth:`LoaderShards.close` shuts the loader
processes down; :func:`open_shards` calls it on every way out of the ``with`` block, and
the processes also exit on their own when the training process dies (DataLoader watches
its parent), or with it when the launcher kills the rank's process group.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Sampler

from scalelab.runner.data import ImageFolderShards, make_shards

PREFETCH_FACTOR = 2


class StepBatchSampler(Sampler[list[int]]):
    """Worker k's index lists for steps ``[start, stop)``, one list per step."""

    def __init__(self, shards: ImageFolderShards, worker: int, start: int, stop: int):
        if not 0 <= worker < shards.workers:
            raise ValueError(f"worker {worker} is not one of {shards.workers} workers")
        if not 0 <= start <= stop:
            raise ValueError(f"need 0 <= start <= stop, got start={start}, stop={stop}")
        self.shards, self.worker, self.start, self.stop = shards, worker, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.start, self.stop):
            yield self.shards.indices(step, self.worker)


class LoaderShards:
    """``shard(step, worker)`` for one worker, served by a DataLoader with ``L`` processes."""

    def __init__(self, shards: ImageFolderShards, worker: int, steps: int, loader_workers: int,
                 pin_memory: bool = False, timeout_s: float = 0.0):
        if loader_workers < 0:
            raise ValueError(f"loader_workers must be >= 0, got {loader_workers}")
        self.base, self.worker, self.steps = shards, worker, steps
        self.workers, self.batch_size = shards.workers, shards.batch_size
        self.loader_workers, self.pin_memory, self.timeout_s = loader_workers, pin_memory, timeout_s
        self._it = None
        self._next = -1

    def _start(self, step: int) -> None:
        self.close()
        procs = self.loader_workers
        loader = DataLoader(
            self.base.dataset,
            batch_sampler=StepBatchSampler(self.base, self.worker, step, self.steps),
            num_workers=procs, pin_memory=self.pin_memory,
            prefetch_factor=PREFETCH_FACTOR if procs else None,
            timeout=self.timeout_s if procs else 0)
        self._it = iter(loader)
        self._next = step

    def shard(self, step: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        if worker != self.worker:
            raise ValueError(f"this loader serves worker {self.worker}, not {worker}")
        if not 0 <= step < self.steps:
            raise ValueError(f"step {step} is outside the run's {self.steps} steps")
        if self._it is None or step != self._next:
            self._start(step)
        x, y = next(self._it)
        self._next = step + 1
        return x, y

    def close(self) -> None:
        """Stop the loader processes (if any) and forget the iterator."""
        it, self._it = self._it, None
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()

    def __enter__(self) -> LoaderShards:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DeviceBatches:
    """A host source's batches on a GPU: pinned host tensors copied on a side stream.

    ``shard(s)`` hands out batch s on the device: taken from :meth:`prefetch` if the worker
    asked for it ahead (after queuing the previous step's compute, so the host's wait for the
    loaders overlaps the device's work), else fetched and copied now. The compute stream waits
    for the copy's event, not the host: a step's data phase on the device clock is the time
    the device had nothing to do because the batch was not there yet.
    """

    def __init__(self, source, worker: int, device: torch.device, steps: int):
        self.source, self.worker, self.device, self.steps = source, worker, device, steps
        self.workers, self.batch_size = source.workers, source.batch_size
        self.stream = torch.cuda.Stream(device=device)
        self._ahead: dict[int, tuple] = {}

    def _copy(self, step: int) -> tuple:
        x, y = self.source.shard(step, self.worker)
        with torch.cuda.stream(self.stream):
            xd = x.to(self.device, non_blocking=True)
            yd = y.to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        return xd, yd, done

    def prefetch(self, step: int) -> None:
        if step < self.steps and step not in self._ahead:
            self._ahead = {step: self._copy(step)}

    def shard(self, step: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        if worker != self.worker:
            raise ValueError(f"these batches serve worker {self.worker}, not {worker}")
        x, y, done = self._ahead.pop(step, None) or self._copy(step)
        current = torch.cuda.current_stream(self.device)
        current.wait_event(done)
        x.record_stream(current)  # made on the side stream, used on this one
        y.record_stream(current)
        return x, y

    def close(self) -> None:
        self._ahead = {}
        close = getattr(self.source, "close", None)
        if close is not None:
            close()


@contextlib.contextmanager
def open_shards(cfg, worker: int, device=None):
    """Worker ``worker``'s shards for a run.

    Synthetic data is made on ``device`` (default the CPU). An image folder is read by
    ``cfg.loader_workers`` loader processes; on a GPU their batches land in pinned memory
    and reach the device through :class:`DeviceBatches`.
    """
    device = torch.device(device or "cpu")
    # a step's shard is the worker's b x K samples (cut into K micro-batches by the step)
    shards = make_shards(cfg.workload, cfg.data, cfg.seed, cfg.workers,
                         cfg.samples_per_worker_step, device)
    if not isinstance(shards, ImageFolderShards):
        yield shards
        return
    cuda = device.type == "cuda"
    with LoaderShards(shards, worker, cfg.steps, cfg.loader_workers,
                      pin_memory=cuda, timeout_s=cfg.timeout_s) as loader:
        if not cuda:
            yield loader
            return
        batches = DeviceBatches(loader, worker, device, cfg.steps)
        try:
            yield batches
        finally:
            batches.close()
