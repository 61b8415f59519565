"""Input data, sharded per worker with a fixed seed.

The global batch of step ``s`` is the concatenation, in worker order, of every worker's
shard, so ``W`` workers at batch ``b`` see exactly the samples one process sees at batch
``W*b`` (:func:`global_batch`).

- Synthetic (default): worker k's shard at step s is ``spec.synthetic_batch(b, seed)`` with a
  seed derived from (run seed, step, k).
- Image folder (``--data PATH``, torchvision ``ImageFolder`` layout): a permutation of the
  samples fixed by the run seed and the epoch; global step s takes the next ``W*b`` indices
  of it and worker k the k-th block of ``b``. Images are resized to the input shape.
"""

from __future__ import annotations

import torch

from scalelab.errors import UsageError


def shard_seed(seed: int, step: int, worker: int) -> int:
    return ((seed * 1_000_003 + step) * 1009 + worker) % (2**63)


class SyntheticData:
    def __init__(self, spec, batch_size: int, seed: int, workers: int):
        self.spec, self.batch_size, self.seed, self.workers = spec, batch_size, seed, workers

    def batch(self, step: int, worker: int):
        return self.spec.synthetic_batch(self.batch_size, seed=shard_seed(self.seed, step, worker))


class FolderData:
    def __init__(self, spec, path: str, batch_size: int, seed: int, workers: int):
        import torchvision
        from torchvision import transforms

        if len(spec.input_shape) != 3:
            raise UsageError(f"--data needs an image input shape C,H,W, got {spec.input_shape}")
        c, h, w = spec.input_shape
        tf = [transforms.Resize((h, w))]
        if c == 1:
            tf.append(transforms.Grayscale(1))
        tf.append(transforms.ToTensor())
        try:
            self.dataset = torchvision.datasets.ImageFolder(path, transform=transforms.Compose(tf))
        except (FileNotFoundError, OSError) as e:
            raise UsageError(f"--data {path}: {e}") from None
        if len(self.dataset.classes) > spec.num_classes:
            raise UsageError(
                f"--data {path} has {len(self.dataset.classes)} classes, "
                f"more than --num-classes {spec.num_classes}"
            )
        self.batch_size, self.seed, self.workers = batch_size, seed, workers
        self.global_batch = batch_size * workers
        if len(self.dataset) < self.global_batch:
            raise UsageError(
                f"--data {path}: {len(self.dataset)} images, fewer than one global batch "
                f"({self.global_batch})"
            )
        self._perm_epoch, self._perm = -1, None

    def _indices(self, step: int, worker: int) -> list[int]:
        per_epoch = len(self.dataset) // self.global_batch
        epoch, pos = divmod(step, per_epoch)
        if epoch != self._perm_epoch:
            g = torch.Generator().manual_seed(shard_seed(self.seed, epoch, 7919))
            self._perm, self._perm_epoch = torch.randperm(len(self.dataset), generator=g), epoch
        start = pos * self.global_batch + worker * self.batch_size
        return self._perm[start:start + self.batch_size].tolist()

    def batch(self, step: int, worker: int):
        items = [self.dataset[i] for i in self._indices(step, worker)]
        return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])


def make_data(config):
    if config.data:
        return FolderData(config.workload, config.data, config.batch_size, config.seed,
                          config.workers)
    return SyntheticData(config.workload, config.batch_size, config.seed, config.workers)


def global_batch(config, step: int):
    """The samples of all workers at ``step``, as one process at batch W*b would see them."""
    data = make_data(config)
    parts = [data.batch(step, k) for k in range(config.workers)]
    return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])
