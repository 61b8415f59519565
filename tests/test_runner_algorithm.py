"""``scalelab run --algorithm``: every worker trains in the configuration it names."""

import pytest
import torch

from scalelab.algorithm_names import run_name
from scalelab.cli import main
from scalelab.runner import RunConfig, run_training
from scalelab.runner.compute import flat
from scalelab.runner.partition import make_layout
from scalelab.runner.stage import pack, unpack
from scalelab.workload import WorkloadSpec

SPEC = WorkloadSpec("tests.toy_runner:probe", input_shape=(3, 6, 6), num_classes=3)


def _seen(probe_dir, rank=0):
    return set((probe_dir / f"rank{rank}.txt").read_text().splitlines())


@pytest.mark.dist
@pytest.mark.parametrize("architecture", ["allreduce", "ps"])
def test_run_trains_in_bf16_and_channels_last_when_asked(tmp_path, monkeypatch, architecture):
    monkeypatch.setenv("TOY_PROBE_DIR", str(tmp_path))
    out = tmp_path / "run.json"
    code = main(["run", "tests.toy_runner:probe", "--input-shape", "3,6,6", "--num-classes",
                 "3", "--workers", "1", "--architecture", architecture, "--batch-size", "4",
                 "--steps", "3", "--threads", "1", "--device", "cpu", "--quiet",
                 "--algorithm", "channels_last+bf16_autocast", "--out", str(out)])
    assert code == 0
    assert _seen(tmp_path) == {"channels_last channels_last torch.bfloat16 cpu"}
    import json

    run = json.loads(out.read_text())
    assert run["config"]["algorithm"] == "channels_last+bf16_autocast"
    assert run["timing"]["algorithm"] == "channels_last+bf16_autocast"


@pytest.mark.dist
def test_run_trains_in_fp32_and_contiguous_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_PROBE_DIR", str(tmp_path))
    run_training(RunConfig(workload=SPEC, workers=1, architecture="allreduce", batch_size=4,
                           steps=2, threads=1, device="cpu"))
    assert _seen(tmp_path) == {"contiguous contiguous torch.float32 cpu"}


@pytest.mark.dist
def test_channels_last_parameter_server_equals_ddp(tmp_path):
    """Pieces cover NHWC memory order on both sides: PS and DDP still train the same."""
    spec = WorkloadSpec("tests.toy_runner:probe", input_shape=(3, 6, 6), num_classes=3,
                        lr=0.05)
    base = dict(workload=spec, workers=2, batch_size=4, steps=3, threads=1, device="cpu",
                algorithm="channels_last")
    ddp = run_training(RunConfig(architecture="allreduce", **base))
    ps = run_training(RunConfig(architecture="ps", ps=2, piece_bytes=64, **base))
    assert ps["final_param_checksum"] == pytest.approx(ddp["final_param_checksum"], rel=1e-6)


def test_flat_reads_a_channels_last_tensor_in_memory_order():
    t = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).reshape(2, 3, 2, 2)
    cl = t.contiguous(memory_format=torch.channels_last)
    assert torch.equal(flat(cl), t.permute(0, 2, 3, 1).reshape(-1))
    assert flat(cl).data_ptr() == cl.data_ptr()  # a view, no copy
    with pytest.raises(ValueError, match="neither"):
        flat(t[:, :, :, :1].transpose(0, 1))


def test_pack_and_unpack_round_trip_channels_last_weights():
    ws = [torch.randn(4, 3, 3, 3).contiguous(memory_format=torch.channels_last),
          torch.randn(5)]
    layout = make_layout([w.numel() for w in ws], 2, "balanced", piece_elems=17)
    bufs = []
    for piece in layout.pieces:
        buf = torch.empty(piece.numel)
        pack(piece, ws, buf)
        bufs.append(buf)
    fresh = [torch.zeros_like(w) for w in ws]
    for piece, buf in zip(layout.pieces, bufs, strict=True):
        unpack(piece, buf, fresh)
    assert all(torch.equal(a, b) for a, b in zip(ws, fresh, strict=True))
    assert fresh[0].is_contiguous(memory_format=torch.channels_last)


def test_bad_and_refused_algorithms_are_one_line(capsys):
    code = main(["run", "resnet18", "--workers", "1", "--algorithm", "bf16_autocast+warp"])
    assert code == 2
    assert "unknown computation option(s) warp" in capsys.readouterr().err
    code = main(["run", "resnet18", "--workers", "1", "--ps", "1",
                 "--algorithm", "fp16_autocast"])
    assert code == 2
    err = capsys.readouterr().err
    assert "loss scaling" in err and "Traceback" not in err


@pytest.mark.parametrize("label, expected", [
    ("channels_last+bf16_autocast", "channels_last+bf16_autocast"),
    ("bf16 (the profile's choice on this device)", "bf16_autocast"),
    ("fp16 (asked with --precision)", "fp16_autocast"),
    ("tf32 (PyTorch's default)", None), ("default", None), (None, None),
    ("fp32 (asked)", None)])
def test_the_launch_command_takes_a_runnable_algorithm(label, expected):
    assert run_name(label) == expected


def test_a_plan_recommending_an_algorithm_launches_with_it():
    from scalelab.plan import Cluster, plan
    from scalelab.plan.inputs import profile_from_dict
    from tests.toy_plan import profile_dict

    for algorithm, flag in (("channels_last+bf16_autocast",
                             "--algorithm channels_last+bf16_autocast"), ("default", None)):
        inp = profile_from_dict(profile_dict(algorithm=algorithm))
        launch = plan(inp, Cluster(nodes=2, network="1GbE")).recommendation.launch
        assert "scalelab run" in launch
        if flag:
            assert flag in launch
        else:
            assert "--algorithm" not in launch


@pytest.mark.dist
def test_validation_times_its_compute_in_the_runs_configuration(tmp_path, monkeypatch):
    from scalelab.errors import UsageError
    from scalelab.experiment.measure import time_concurrently
    from scalelab.experiment.validate import ValidationOptions, _run_config

    monkeypatch.setenv("TOY_PROBE_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "0")  # the probe writes from rank processes only
    [t] = time_concurrently(SPEC, 4, 1, 1, 2, algorithm="channels_last+bf16_autocast")
    assert t["algorithm"] == "channels_last+bf16_autocast"
    assert _seen(tmp_path) == {"channels_last channels_last torch.bfloat16 cpu"}
    options = ValidationOptions(algorithm="channels_last")
    cfg = _run_config(SPEC, {"workers": 2, "architecture": "ps", "batch_size": 4}, options)
    assert cfg.algorithm == "channels_last"
    recorded = options.to_dict()  # validation.json's "options"
    assert recorded["algorithm"] == "channels_last" and recorded["fresh_profiles"] is True
    with pytest.raises(UsageError, match="unknown computation option"):
        ValidationOptions(algorithm="fast")


def test_ranks_get_a_short_openmp_spin_unless_the_environment_sets_one():
    from scalelab.runner.launch import OMP_ENV, training_environment

    assert training_environment({"PATH": "/bin"}) == {"PATH": "/bin", **OMP_ENV}
    assert training_environment({"OMP_WAIT_POLICY": "ACTIVE"}) == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert training_environment({"GOMP_SPINCOUNT": "0"}) == {"GOMP_SPINCOUNT": "0"}


def test_colocate_and_dedicated_placement_contradict(capsys):
    code = main(["run", "resnet18", "--workers", "2", "--ps", "1", "--colocate",
                 "--ps-placement", "dedicated"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "contradicts --ps-placement dedicated" in err[0]


def test_fp16_is_refused_for_sharded_runs_in_one_line(capsys):
    code = main(["run", "resnet18", "--workers", "2", "--architecture", "fsdp",
                 "--algorithm", "channels_last+fp16_autocast"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--architecture fsdp" in err[0]
