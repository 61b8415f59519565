"""Checkpoints: a synchronous run killed after a checkpoint and resumed ends exactly where an
uninterrupted run ends; files load with weights_only=True; another model's checkpoint is
refused with one line and exit 2."""

import pytest
import torch

from scalelab.cli import main
from scalelab.errors import RunFailure
from scalelab.runner import RunConfig, run_training
from scalelab.workload import WorkloadSpec

pytestmark = pytest.mark.dist

SPEC = WorkloadSpec("tests.toy_runner:faulty", input_shape=(6,), num_classes=3, lr=0.05)


def _cfg(arch: str, d, **kw) -> RunConfig:
    extra = dict(ps=2) if arch == "ps" else {}
    return RunConfig(workload=SPEC, workers=2, architecture=arch, steps=6, batch_size=4,
                     checkpoint_dir=str(d), checkpoint_every=2, timeout_s=20, device="cpu",
                     **extra, **kw)


@pytest.mark.parametrize("arch", ["ps", "allreduce"])
def test_killed_and_resumed_run_ends_with_the_uninterrupted_parameters(
        arch, tmp_path, monkeypatch, capsys):
    whole = run_training(_cfg(arch, tmp_path / "whole"))
    ckpt = tmp_path / "ckpt"
    monkeypatch.setenv("TOY_FAIL", "1:5:kill")
    with pytest.raises(RunFailure, match="rank 1 \\(worker 1\\)"):
        run_training(_cfg(arch, ckpt))
    monkeypatch.delenv("TOY_FAIL")
    owner = "ps0" if arch == "ps" else "ddp"
    files = sorted(ckpt.glob(f"{owner}-step*.pt"))
    assert [f.name for f in files] == [f"{owner}-step00000002.pt", f"{owner}-step00000004.pt"]
    payload = torch.load(files[-1], weights_only=True)
    assert payload["step"] == 4 and payload["identity"]["model"] == SPEC.model
    resumed = run_training(_cfg(arch, ckpt, resume=True))
    assert resumed["resumed_from_step"] == 4
    assert resumed["final_param_checksum"] == whole["final_param_checksum"]
    assert len([r for r in resumed["per_rank"][0:1] if r["steps"] == 2]) == 1

    # the same folder offered to another model: one line, exit 2, nothing started
    code = main(["run", "tests.toy_runner:wide", "--input-shape", "6", "--num-classes", "3",
                 "--workers", "2", *(["--ps", "2"] if arch == "ps" else
                                     ["--architecture", "allreduce"]),
                 "--checkpoint-dir", str(ckpt), "--resume", "--quiet", "--device", "cpu",
                 "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "is from another model" in err[0], err


@pytest.mark.parametrize("content,kind", [(b"garbage\n", "UnpicklingError"), (b"", "EOFError")])
def test_a_damaged_checkpoint_is_one_line_saying_what_to_do(tmp_path, content, kind):
    from scalelab.errors import UsageError
    from scalelab.runner import checkpoint

    path = tmp_path / "ps0-step00000004.pt"
    path.write_bytes(content)
    with pytest.raises(UsageError) as e:
        checkpoint.load(path)
    # torch's own message for a file it will not unpickle runs to 9 lines
    assert str(e.value) == (f"{path}: not a readable scalelab checkpoint ({kind}); move it "
                            "away to resume from the one before it")


def test_a_bad_input_message_is_printed_on_one_line(tmp_path, capsys, monkeypatch):
    from scalelab import report
    from scalelab.errors import UsageError

    def quoting(paths, out):
        raise UsageError("x.json: it says\n  what a library said\n\nover lines")

    monkeypatch.setattr(report, "write_report", quoting)
    assert main(["report", str(tmp_path / "x.json"), "--out", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err == \
        "scalelab: error: x.json: it says what a library said over lines\n"
