"""Generated image folders: deterministic, the requested layout, readable as the runner reads."""

import hashlib

import pytest
import torch

from scalelab.errors import UsageError
from scalelab.imagefolder import check_folder, main, open_dataset, write_image_folder


def _digest(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.jpg"))}


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = write_image_folder(tmp_path / "a", images=6, size_px=32, classes=3, seed=4)
    write_image_folder(tmp_path / "b", images=6, size_px=32, classes=3, seed=4)
    write_image_folder(tmp_path / "c", images=6, size_px=32, classes=3, seed=5)
    da, db, dc = (_digest(tmp_path / n) for n in "abc")
    assert da == db and da.keys() == dc.keys() and da != dc
    assert len(set(da.values())) == 6
    assert sorted(da) == [f"class_{i % 3:03d}/img_{i:05d}.jpg" for i in (0, 3, 1, 4, 2, 5)]
    assert a.images == 6 and a.total_bytes == sum(
        p.stat().st_size for p in (tmp_path / "a").rglob("*.jpg"))


def test_reads_back_at_the_workload_shape(tmp_path):
    from PIL import Image

    write_image_folder(tmp_path, images=4, size_px=40, classes=2)
    with Image.open(tmp_path / "class_001" / "img_00001.jpg") as im:
        assert im.format == "JPEG" and im.size == (40, 40)
    ds = open_dataset(tmp_path, (3, 16, 16), num_classes=2)
    x, y = ds[2]  # sorted by class, then name: class_001/img_00001.jpg
    assert x.shape == (3, 16, 16) and y == 1 and ds.classes == ["class_000", "class_001"]
    assert torch.equal(x, open_dataset(tmp_path, (3, 16, 16))[2][0])
    gray = open_dataset(tmp_path, (1, 8, 8))[0][0]
    assert gray.shape == (1, 8, 8)
    with pytest.raises(UsageError, match="2 classes, more than --num-classes 1"):
        open_dataset(tmp_path, (3, 16, 16), num_classes=1)
    with pytest.raises(UsageError, match="C,H,W"):
        open_dataset(tmp_path, (16,))


def test_bad_requests(tmp_path):
    with pytest.raises(ValueError, match="classes=5"):
        write_image_folder(tmp_path / "x", images=4, size_px=32, classes=5)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "other.txt").write_text("x")
    with pytest.raises(ValueError, match="not an empty folder"):
        write_image_folder(tmp_path / "full", images=2, size_px=32)
    with pytest.raises(UsageError, match="no images found"):
        check_folder(tmp_path / "full")
    with pytest.raises(UsageError, match="no such folder"):
        check_folder(tmp_path / "missing")


def test_command_line(tmp_path, capsys):
    assert main([str(tmp_path / "d"), "--images", "3", "--size", "16", "--classes", "1"]) == 0
    assert "3 images, 1 classes, 16 px" in capsys.readouterr().out
    assert main([str(tmp_path / "d"), "--images", "3"]) == 2
    assert "not an empty folder" in capsys.readouterr().err


def test_profile_times_the_runners_decode(tmp_path):
    from scalelab.profiler.input_pipeline import image_dataset, profile_input

    write_image_folder(tmp_path, images=8, size_px=48, classes=2)
    ds = image_dataset(tmp_path, (3, 12, 12))
    assert torch.equal(ds[5][0], open_dataset(tmp_path, (3, 12, 12))[5][0])
    io = profile_input(tmp_path, (3, 12, 12), batch_size=4, compute_s=1.0,
                       worker_counts=(0,), batches=2)
    assert io["images"] == 8 and io["load_s_per_batch"] > 0
    assert io["load_s_per_sample"] == pytest.approx(io["load_s_per_batch"] / 4)
    assert io["loader_workers_needed"] == 1


def test_profile_reads_a_small_folder_once_before_timing(tmp_path, monkeypatch):
    import torch

    from scalelab.profiler import input_pipeline

    write_image_folder(tmp_path, images=6, size_px=32, classes=2)
    opened = []
    real_open = open

    def counting_open(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    threads = torch.get_num_threads()
    io = input_pipeline.profile_input(tmp_path, (3, 8, 8), batch_size=2, compute_s=1.0,
                                      worker_counts=(0,), batches=1)
    assert io["page_cache_warmed"] is True
    assert torch.get_num_threads() == threads  # the one-thread timing restores the threads
    images = {p for p, _ in input_pipeline.image_dataset(tmp_path, (3, 8, 8)).samples}
    assert images <= set(opened)
    monkeypatch.setattr(input_pipeline, "WARM_CACHE_BYTES", 0)
    opened.clear()
    io = input_pipeline.profile_input(tmp_path, (3, 8, 8), batch_size=2, compute_s=1.0,
                                      worker_counts=(0,), batches=1)
    assert io["page_cache_warmed"] is False
    assert not images <= set(opened)  # only the samples the timing decodes were read


@pytest.mark.parametrize("loader_workers", ["0", "1"])
def test_a_file_that_is_no_image_is_named_in_one_line(tmp_path, capsys, loader_workers):
    from scalelab.cli import main as cli

    write_image_folder(tmp_path / "data", images=8, size_px=16, classes=2)
    bad = tmp_path / "data" / "class_001" / "img_00009.jpg"
    bad.write_bytes(b"not an image")
    code = cli(["run", "resnet18", "--input-shape", "3,16,16", "--num-classes", "2",
                "--workers", "1", "--steps", "3", "--warmup-steps", "0", "--quiet",
                "--data", str(tmp_path / "data"), "--loader-workers", loader_workers,
                "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip().splitlines()
    # before: exit 1, "rank 0 (worker 0) failed: UnidentifiedImageError: ...", the line
    # holding the DataLoader's traceback where a loader process decoded
    assert code == 2 and len(err) == 1, err
    assert err[0] == (f"scalelab: error: --data: {bad} cannot be read as an image "
                      "(UnidentifiedImageError)")


def test_one_line_of_an_error_raised_again_from_a_loader_process():
    from scalelab.runner.entry import one_line

    wrapped = RuntimeError("Caught OSError in DataLoader worker process 0.\nOriginal Traceback "
                           "(most recent call last):\n  File \"x.py\", line 1, in f\n    g()\n"
                           "OSError: disk on fire\n")
    assert one_line(wrapped) == "RuntimeError: OSError: disk on fire"
    same = UsageError("Caught UsageError in DataLoader worker process 0.\nOriginal Traceback "
                      "(most recent call last):\nscalelab.errors.UsageError: --data: a.jpg bad\n")
    assert one_line(same) == "--data: a.jpg bad"
