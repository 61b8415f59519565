"""Gradient accumulation and recomputation in ``scalelab run``: K micro-batches of b train
as one batch of b K (all-reduce, fsdp, parameter servers), recomputed blocks give the same
losses with a lower peak, and the bad inputs and contradictions are one line, exit 2."""

import json
import os
import subprocess
import sys

import pytest
import torch

from scalelab.cli import main
from scalelab.runner import RunConfig, run_training
from scalelab.workload import WorkloadSpec

RESNET = WorkloadSpec("tests.toy_runner:resnet_like", input_shape=(3, 8, 8), num_classes=3,
                      lr=0.05)
HEAVY = WorkloadSpec("tests.toy_runner:activation_heavy", input_shape=(256,), num_classes=3,
                     lr=0.01)


def _train(tmp_path, name, spec=RESNET, **kw):
    """(run.json, final parameters, worker 0's per-step losses) of one run."""
    out, ranks = tmp_path / f"{name}.pt", tmp_path / f"{name}.jsonl"
    kw.setdefault("workers", 2)
    kw.setdefault("warmup_steps", 1)
    cfg = RunConfig(workload=spec, steps=3, timeout_s=60, device="cpu",
                    final_params_path=str(out), **kw)
    result = run_training(cfg, ranks_path=str(ranks))
    lines = [json.loads(line) for line in ranks.read_text().splitlines() if line.strip()]
    losses = [r["loss"] for r in sorted(lines, key=lambda r: r["step"])
              if r.get("rank") == 0 and r.get("type") == "step"]
    return result, torch.load(out, weights_only=True), losses


@pytest.fixture(scope="module")
def big_batch(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("big"), "big", architecture="allreduce",
                  batch_size=8)


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize("arch,extra", [("allreduce", {}), ("fsdp", {"shard_level": 3}),
                                        ("fsdp", {"shard_level": 1}), ("ps", {"ps": 1})])
def test_four_micro_batches_of_2_train_as_one_batch_of_8(arch, extra, big_batch, tmp_path):
    want, want_params, want_losses = big_batch
    got, params, losses = _train(tmp_path, arch, architecture=arch, batch_size=2,
                                 accumulation_steps=4, **extra)
    diff = max(float((params[n] - want_params[n]).abs().max()) for n in want_params)
    assert diff <= 1e-5, f"{arch}: parameters differ by {diff:.3g}"
    assert losses == pytest.approx(want_losses, abs=1e-5) and len(losses) == 3
    assert got["final_param_checksum"] == pytest.approx(want["final_param_checksum"], rel=1e-6)
    assert got["samples_per_step"] == 2 * 2 * 4 == want["samples_per_step"]
    assert got["config"]["accumulation_steps"] == 4 and got["accumulation_steps"] == 4
    # one exchange per step: the bytes reduced are the gradients once, not four times
    worker = got["bytes_per_step"]["worker"]
    sent = worker.get("bytes_reduced", worker.get("bytes_sent"))
    assert sent == got["param_bytes"]


@pytest.mark.dist
def test_recomputed_blocks_give_the_same_losses_with_a_lower_peak(tmp_path, monkeypatch):
    # the peak from before the first step: on the CPU the allocator keeps what a step
    # freed resident, so a peak started after a warm-up step sees little of the next one;
    # and glibc's dynamic mmap threshold keeps freed 2 MiB tensors in its heap, so the
    # resident set follows what is live only with the threshold fixed (the workers
    # inherit it)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    kw = dict(architecture="allreduce", workers=1, batch_size=2048, warmup_steps=0)
    plain, p_params, p_losses = _train(tmp_path, "plain", spec=HEAVY, **kw)
    full, f_params, f_losses = _train(tmp_path, "full", spec=HEAVY, recompute="full", **kw)
    assert f_losses == pytest.approx(p_losses, abs=1e-6)
    assert all(torch.allclose(f_params[n], p_params[n], atol=1e-6) for n in p_params)
    assert full["recompute"] == "full" and plain["recompute"] == "none"
    # four blocks of ~18 saved 2 MiB tensors each, against their inputs and one block's
    freed = plain["memory"]["peak_bytes"] - full["memory"]["peak_bytes"]
    assert freed > 40 * 2**20, (plain["memory"], full["memory"])


def _cli(tmp_path, capsys, *args) -> tuple[int, list[str]]:
    """``scalelab run`` in this process: (exit code, stderr lines)."""
    capsys.readouterr()
    try:
        code = main(["run", "tests.toy_runner:wide", "--input-shape", "6", "--num-classes",
                     "3", "--workers", "2", "--quiet", "--device", "cpu", "--steps", "2",
                     "--out", str(tmp_path / "r.json"), *args])
    except SystemExit as e:  # argparse's one-line errors
        code = e.code
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("args,says", [
    (["--accumulation-steps", "0"], "must be > 0"),
    (["--accumulation-steps", "-1"], "must be > 0"),
    (["--accumulation-steps", "x"], "not an integer"),
    (["--accumulation-steps", "2", "--mode", "async", "--ps", "1"], "needs --mode sync"),
    (["--recompute", "some"], "invalid choice: 'some'"),
    (["--architecture", "fsdp", "--partition", "tensor"], "use --architecture ps"),
    (["--architecture", "allreduce", "--piece-size", "4MB"], "use --architecture ps"),
])
def test_bad_memory_options_are_one_line_exit_2(args, says, tmp_path, capsys):
    code, err = _cli(tmp_path, capsys, *args)
    assert code == 2 and len(err) == 1 and says in err[0], err


def test_checkpoints_of_another_architecture_or_a_file_are_refused_before_starting(
        tmp_path, capsys):
    fsdp_ckpt = tmp_path / "f"
    (fsdp_ckpt / "fsdp-step00000002").mkdir(parents=True)
    (fsdp_ckpt / "fsdp-step00000002" / "identity.json").write_text("{}")
    code, err = _cli(tmp_path, capsys, "--architecture", "allreduce", "--checkpoint-dir",
                     str(fsdp_ckpt), "--resume")
    assert code == 2 and len(err) == 1 and "resume with --architecture fsdp" in err[0], err
    ps_ckpt = tmp_path / "p"
    ps_ckpt.mkdir()
    (ps_ckpt / "ps0-step00000002.pt").write_bytes(b"")
    code, err = _cli(tmp_path, capsys, "--architecture", "fsdp", "--checkpoint-dir", str(ps_ckpt),
                     "--resume")
    assert code == 2 and len(err) == 1 and "resume with --architecture ps" in err[0], err
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, err = _cli(tmp_path, capsys, "--architecture", "fsdp", "--checkpoint-dir", str(a_file),
                     "--checkpoint-every", "1")
    assert code == 2 and len(err) == 1 and "not a folder" in err[0], err


@pytest.mark.dist
@pytest.mark.slow
def test_resuming_a_finished_run_reports_its_result(tmp_path, capsys):
    args = ["run", "tests.toy_runner:wide", "--input-shape", "6", "--num-classes", "3",
            "--workers", "1", "--architecture", "allreduce", "--steps", "2", "--device",
            "cpu", "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "2",
            "--out", str(tmp_path / "run.json")]
    assert main(args) == 0
    first = json.loads((tmp_path / "run.json").read_text())
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    out, err = capsys.readouterr()
    assert "was complete" in err and "nothing was trained" in err
    again = json.loads((tmp_path / "run.json").read_text())
    assert again["samples_per_s"] == first["samples_per_s"] is not None
    assert f"{first['final_param_checksum']:.10g}" in out


def test_a_killed_runs_temporary_folder_is_removed_by_the_next(tmp_path, monkeypatch):
    import tempfile

    from scalelab.runner import make_workdir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"scalelab-run-{dead.pid}-abc123"
    stale.mkdir()
    (stale / "config.json").write_text("{}")
    alive = tmp_path / f"scalelab-run-{os.getppid()}-def456"  # a live process's: kept
    alive.mkdir()
    new = make_workdir("run")
    assert not stale.exists() and alive.exists() and new.is_dir()
    assert new.name.startswith(f"scalelab-run-{os.getpid()}-")
