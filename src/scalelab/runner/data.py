"""Training data, sharded per worker so the union of the shards is one global batch.

Step s of a run with W workers at per-worker batch b has a global batch of W*b samples;
worker k gets samples ``[k*b, (k+1)*b)`` of it. One process training at batch W*b on
:func:`global_batch` sees exactly the union of what the W workers saw, which is what the
runner's correctness tests compare against.

- synthetic: worker k's shard of step s is drawn from a generator seeded with
  ``mix(seed, s, k)`` on the worker's device (:class:`SyntheticShards`).
- token file (a language model's ``--data PATH.bin``): :class:`TokenFileShards`.
- image folder (``--data PATH``, torchvision ``ImageFolder`` layout ``PATH/<class>/<image>``):
  a permutation of the images drawn from ``seed`` each epoch; the global batch of step s is
  positions ``[s*W*b, (s+1)*W*b)`` of the concatenated epochs. ``shard`` decodes in the
  calling process; the runner's workers read the same indices through loader processes
  (:mod:`scalelab.runner.loader`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from scalelab.errors import UsageError
from scalelab.workload import WorkloadSpec


def mix(*values: int) -> int:
    """A reproducible 63-bit seed from integers (splitmix64 over the values)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (int(v) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
    return h & 0x7FFFFFFFFFFFFFFF


class SyntheticShards:
    """Random batches made where they are used: on the worker's device, from a generator of
    that device seeded with ``mix(seed, step, worker)``.

    On a GPU that is two kernels and no host work or copy, so the step does not wait for its
    data; every process on the same kind of device draws the same numbers for the same
    (seed, step, worker), so parameter servers, DDP and one process agree as on the CPU (a
    GPU's generator draws other numbers than the CPU's: runs agree within a device type).
    """

    def __init__(self, spec: WorkloadSpec, seed: int, workers: int, batch_size: int,
                 device: str | torch.device = "cpu"):
        self.spec, self.seed, self.workers, self.batch_size = spec, seed, workers, batch_size
        self.device = torch.device(device)
        self._gen = None if self.device.type == "cpu" else torch.Generator(device=self.device)

    def shard(self, step: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.device.type == "cpu":
            return self.spec.synthetic_batch(self.batch_size, seed=mix(self.seed, step, worker))
        if self.spec.tokens:
            return self.spec.synthetic_batch(self.batch_size, seed=mix(self.seed, step, worker),
                                             device=self.device, generator=self._gen)
        g = self._gen.manual_seed(mix(self.seed, step, worker))
        x = torch.randn((self.batch_size, *self.spec.input_shape), generator=g,
                        device=self.device)
        y = torch.randint(0, self.spec.num_classes, (self.batch_size,), generator=g,
                          device=self.device)
        return x, y


class EpochOrder:
    """Which image sits at a position of the concatenated epochs.

    Epoch e is a permutation of the ``n`` images drawn from ``mix(seed, e)``; position p is
    image ``perm_e[p mod n]`` with ``e = p // n``. Only the current epoch's permutation is
    kept.
    """

    def __init__(self, n: int, seed: int):
        if n < 1:
            raise UsageError("the image folder holds no images")
        self.n, self.seed = n, seed
        self._perms: dict[int, torch.Tensor] = {}

    def index(self, position: int) -> int:
        epoch, i = divmod(position, self.n)
        if epoch not in self._perms:
            g = torch.Generator().manual_seed(mix(self.seed, epoch))
            self._perms = {epoch: torch.randperm(self.n, generator=g)}
        return int(self._perms[epoch][i])


def shard_positions(step: int, worker: int, workers: int, batch_size: int) -> range:
    """Positions of worker k's shard of step s: ``[(s*W + k)*b, (s*W + k + 1)*b)``."""
    first = (step * workers + worker) * batch_size
    return range(first, first + batch_size)


class ImageFolderShards:
    def __init__(self, spec: WorkloadSpec, root: str, seed: int, workers: int, batch_size: int):
        from scalelab.imagefolder import open_dataset

        if not Path(root).is_dir():
            raise UsageError(f"--data {root}: not a folder")
        self.dataset = open_dataset(root, spec.input_shape, spec.num_classes)
        self.order = EpochOrder(len(self.dataset), seed)
        self.seed, self.workers, self.batch_size = seed, workers, batch_size

    def indices(self, step: int, worker: int) -> list[int]:
        """Dataset indices of worker k's shard of step s, in order."""
        return [self.order.index(p)
                for p in shard_positions(step, worker, self.workers, self.batch_size)]

    def shard(self, step: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        from torch.utils.data import default_collate

        return tuple(default_collate([self.dataset[i] for i in self.indices(step, worker)]))


class TokenFileShards:
    """A language model's windows of a token file (:mod:`scalelab.tokens`): the global batch
    of step s is the first W*b window starts drawn from ``mix(seed, s)``, worker k's shard
    starts ``[k*b, (k+1)*b)`` of them; the target is the window itself (next-token loss)."""

    def __init__(self, spec: WorkloadSpec, path: str, seed: int, workers: int, batch_size: int):
        from scalelab.token_models import token_dtype
        from scalelab.tokens import TokenFile

        self.file = TokenFile(path, spec.vocab, spec.seq_len,
                              token_dtype(spec.token_dtype, spec.vocab))
        self.seed, self.workers, self.batch_size = seed, workers, batch_size

    def shard(self, step: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        starts = self.file.starts(mix(self.seed, step), self.workers * self.batch_size)
        x = torch.from_numpy(self.file.windows(
            starts[worker * self.batch_size:(worker + 1) * self.batch_size]))
        return x, x


def make_shards(spec: WorkloadSpec, data: str | None, seed: int, workers: int, batch_size: int,
                device: str | torch.device = "cpu"):
    """Shards of the run's data; synthetic batches are made on ``device``. A language
    model's ``data`` is a token file, an image model's an image folder."""
    if data in (None, "", "synthetic"):
        return SyntheticShards(spec, seed, workers, batch_size, device)
    if spec.tokens:
        return TokenFileShards(spec, data, seed, workers, batch_size)
    return ImageFolderShards(spec, data, seed, workers, batch_size)


def global_batch(shards, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch of one step: the workers' shards concatenated in worker order."""
    parts = [shards.shard(step, k) for k in range(shards.workers)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
