"""Per-worker data shards: reproducible, disjoint per worker, their union the global batch."""

import pytest
import torch

from scalelab.errors import UsageError
from scalelab.runner.data import global_batch, make_shards
from scalelab.workload import WorkloadSpec


def test_synthetic_shards_are_reproducible_and_distinct():
    spec = WorkloadSpec("tests.toy_models:mlp", input_shape=(6,), num_classes=3)
    a, b = make_shards(spec, None, 7, 2, 4), make_shards(spec, None, 7, 2, 4)
    assert torch.equal(a.shard(3, 1)[0], b.shard(3, 1)[0])
    assert not torch.equal(a.shard(3, 0)[0], a.shard(3, 1)[0])
    assert not torch.equal(a.shard(3, 0)[0], a.shard(4, 0)[0])
    x, y = global_batch(a, 3)
    assert x.shape == (8, 6) and torch.equal(x[4:], a.shard(3, 1)[0])


def test_image_folder_shards_cover_each_epoch_once(tmp_path):
    from PIL import Image

    for c in ("cat", "dog"):
        (tmp_path / c).mkdir()
        for i in range(4):
            Image.new("RGB", (10, 10), (40 * i, 200 if c == "dog" else 0, 7)).save(
                tmp_path / c / f"{i}.png")
    spec = WorkloadSpec("tests.toy_models:mlp", input_shape=(3, 8, 8), num_classes=2)
    shards = make_shards(spec, str(tmp_path), seed=1, workers=2, batch_size=2)
    again = make_shards(spec, str(tmp_path), seed=1, workers=2, batch_size=2)
    assert torch.equal(shards.shard(1, 1)[0], again.shard(1, 1)[0])
    epoch = [global_batch(shards, s) for s in range(2)]  # 2 steps x 2 workers x 2 = 8 images
    xs = torch.cat([e[0] for e in epoch])
    assert xs.shape == (8, 3, 8, 8)
    assert len({tuple(x.flatten()[:4].tolist()) + (float(x.sum()),) for x in xs}) == 8
    assert sorted(torch.cat([e[1] for e in epoch]).tolist()) == [0] * 4 + [1] * 4


def test_image_folder_with_too_many_classes(tmp_path):
    from PIL import Image

    for c in ("a", "b", "c"):
        (tmp_path / c).mkdir()
        Image.new("RGB", (4, 4)).save(tmp_path / c / "x.png")
    spec = WorkloadSpec("tests.toy_models:mlp", input_shape=(3, 4, 4), num_classes=2)
    with pytest.raises(UsageError, match="3 classes"):
        make_shards(spec, str(tmp_path), 0, 1, 1)
