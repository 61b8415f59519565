"""Training data, sharded per worker so the union of the shards is one global batch.

Step s of a run with W workers at per-worker batch b has a global batch of W*b samples;
worker k gets samples ``[k*b, (k+1)*b)`` of it. One process training at batch W*b on
:func:`global_batch` sees exactly the union of what the W workers saw, which is what the
runner's correctness tests compare against.

- synthetic: worker k's shard of step s is ``spec.synthetic_batch(b, seed=mix(seed, s, k))``.
- image folder (``--data PATH``, torchvision ``ImageFolder`` layout ``PATH/<class>/<image>``):
  a permutation of the images drawn from ``seed`` each epoch; the global batch of step s is
  positions ``[s*W*b, (s+1)*W*b)`` of the concatenated epochs.
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
    def __init__(self, spec: WorkloadSpec, seed: int, workers: int, batch_size: int):
        self.spec, self.seed, self.workers, self.batch_size = spec, seed, workers, batch_size

    def shard(self, step: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.spec.synthetic_batch(self.batch_size, seed=mix(self.seed, step, worker))


class ImageFolderShards:
    def __init__(self, spec: WorkloadSpec, root: str, seed: int, workers: int, batch_size: int):
        from torchvision import datasets, transforms

        if len(spec.input_shape) != 3:
            raise UsageError(f"--data needs an image input shape C,H,W, got {spec.input_shape}")
        c, h, w = spec.input_shape
        if not Path(root).is_dir():
            raise UsageError(f"--data {root}: not a folder")
        steps = [transforms.Resize((h, w)), transforms.ToTensor()]
        if c == 1:
            steps.insert(0, transforms.Grayscale(1))
        try:
            self.dataset = datasets.ImageFolder(root, transform=transforms.Compose(steps))
        except (FileNotFoundError, RuntimeError) as e:
            raise UsageError(f"--data {root}: {e}") from None
        if len(self.dataset.classes) > spec.num_classes:
            raise UsageError(
                f"--data {root} has {len(self.dataset.classes)} classes, more than "
                f"--num-classes {spec.num_classes}"
            )
        self.seed, self.workers, self.batch_size = seed, workers, batch_size
        self._perms: dict[int, torch.Tensor] = {}

    def _index(self, position: int) -> int:
        n = len(self.dataset)
        epoch, i = divmod(position, n)
        if epoch not in self._perms:
            g = torch.Generator().manual_seed(mix(self.seed, epoch))
            self._perms = {epoch: torch.randperm(n, generator=g)}
        return int(self._perms[epoch][i])

    def shard(self, step: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        first = (step * self.workers + worker) * self.batch_size
        items = [self.dataset[self._index(first + i)] for i in range(self.batch_size)]
        x = torch.stack([it[0] for it in items])
        y = torch.tensor([it[1] for it in items], dtype=torch.long)
        return x, y


def make_shards(spec: WorkloadSpec, data: str | None, seed: int, workers: int, batch_size: int):
    if data in (None, "", "synthetic"):
        return SyntheticShards(spec, seed, workers, batch_size)
    return ImageFolderShards(spec, data, seed, workers, batch_size)


def global_batch(shards, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch of one step: the workers' shards concatenated in worker order."""
    parts = [shards.shard(step, k) for k in range(shards.workers)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
