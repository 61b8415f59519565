import json

import pytest
import torch
from PIL import Image

from scalelab.cli import main
from scalelab.profiler import ProfileOptions, measure_steps, run_profile
from scalelab.profiler.probe import TrialRunner
from scalelab.results import read_json
from scalelab.workload import WorkloadSpec

MLP = WorkloadSpec("tests.toy_models:mlp", input_shape=(6,), num_classes=3)
CONV = WorkloadSpec("tests.toy_profiler:small_cnn", input_shape=(3, 16, 16), num_classes=4)

CONTRACT = {
    "environment": ["torch", "device", "device_name", "num_threads"],
    "workload": ["model", "input_shape", "num_classes", "optimizer", "param_count",
                 "param_bytes", "tensor_bytes", "flops_per_sample"],
    "fit": ["step_s", "memory_bytes"],
    "algorithms": ["chosen", "candidates"],
    "io": ["source", "load_s_per_batch", "loader_workers_needed"],
}
BATCH_FIELDS = ["batch_size", "forward_s", "backward_s", "optimizer_s", "step_s",
                "step_s_spread", "samples_per_s", "peak_memory_bytes"]


@pytest.mark.slow
def test_profile_json_holds_every_contract_field(tmp_path):
    out = tmp_path / "profile.json"
    assert main(["profile", CONV.model, "--input-shape", "3,16,16", "--num-classes", "4",
                 "--batch-sizes", "2,4", "--out", str(out), "--quiet"]) == 0
    prof = read_json(out, "profile")
    for section, keys in CONTRACT.items():
        for k in keys:
            assert k in prof[section], f"{section}.{k}"
    for k in ("memory_budget_bytes", "max_batch_size", "recommended_batch_size"):
        assert prof[k] is not None
    assert [r["batch_size"] for r in prof["batches"]] == [2, 4]
    for r in prof["batches"]:
        assert all(r[k] is not None for k in BATCH_FIELDS)
        assert r["step_s"] >= r["forward_s"] > 0 and r["peak_memory_bytes"] > 0
        assert r["samples_per_s"] == pytest.approx(r["batch_size"] / r["step_s"])
    assert {"intercept", "per_sample"} <= set(prof["fit"]["step_s"])
    names = [c["name"] for c in prof["algorithms"]["candidates"]]
    assert names[0] == "default" and "channels_last" in names
    assert prof["algorithms"]["chosen"] in names
    assert prof["workload"]["param_count"] == sum(p.numel() for p in
                                                  CONV.build_model().parameters())
    # Five timed steps per point unless asked otherwise, recorded with the profile.
    assert prof["timed_steps"] == 5 and all(r["timed_steps"] == 5 for r in prof["batches"])
    assert not any("timed step" in w for w in prof["warnings"])
    assert isinstance(prof["machine_busy"], bool)


@pytest.mark.slow
def test_auto_search_stops_at_cap_and_reuses_trials():
    prof = run_profile(MLP, ProfileOptions(max_batch=8, algorithms="none", steps=2))
    sizes = [r["batch_size"] for r in prof["batches"]]
    assert sizes[0] == 1 and all(b <= 8 for b in sizes)
    assert prof["max_batch_size"] == 8 and prof["max_batch_capped"]
    assert prof["recommended_batch_size"] in sizes
    assert prof["cost"]["trials"] == len(sizes) + len(prof["memory_probes"])


def test_a_trial_past_the_budget_is_killed_not_the_tool():
    with TrialRunner(MLP, "cpu", budget_bytes=50 * 2**20) as runner:
        t = runner.run(4)
    assert not t.fits and "budget" in t.reason
    assert torch.ones(1).item() == 1.0  # this process is alive and well


def test_a_trial_past_its_time_limit_is_a_batch_that_did_not_train():
    # the probe's limit (900 s by default) ends the trial, not the profile (no traceback)
    with TrialRunner(MLP, "cpu", budget_bytes=2**34, timeout_s=0.001) as runner:
        t = runner.run(4)
        assert not t.fits and "took longer than the probe's" in t.reason
        runner.timeout_s = 120.0
        assert runner.run(4).fits  # the next trial starts a new probe process


def test_measure_steps_in_process():
    t = measure_steps(MLP, batch_size=4, warmup=1, steps=3)
    assert t.timed_steps == 3 and t.step_s > 0 and t.samples_per_s == pytest.approx(4 / t.step_s)


def test_time_steps_takes_each_batch_from_a_source_and_times_the_wait_apart():
    import time

    from scalelab.profiler import time_steps

    served = []

    def batches():
        time.sleep(0.02)  # a loader that takes 20 ms to deliver
        served.append(len(served))
        return torch.full((4, 6), float(len(served))), torch.zeros(4, dtype=torch.long)

    model = MLP.build_model(seed=0)
    t = time_steps(MLP, model, 4, warmup=2, steps=3, batches=batches)
    assert served == [0, 1, 2, 3, 4]  # one batch per step, warm-up included
    assert 0.02 <= t.data_s < 0.2 and t.step_s < t.data_s  # the wait is not in the step
    assert time_steps(MLP, model, 4, warmup=0, steps=1).data_s == 0.0  # synthetic batch


def _jpeg_folder(root, n=6):
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for i in range(n):
            Image.new("RGB", (40, 30), (i * 40, 100, 200)).save(root / cls / f"{i}.jpg")
    return root


@pytest.mark.slow
def test_input_pipeline_with_real_folder(tmp_path):
    data = _jpeg_folder(tmp_path / "imgs")
    prof = run_profile(CONV, ProfileOptions(batch_sizes=[4], algorithms="none",
                                            data=str(data)))
    io = prof["io"]
    assert io["source"] == str(data) and io["images"] == 12
    assert io["load_s_per_batch"] > 0 and io["loader_workers_needed"] >= 1
    assert [t["loader_workers"] for t in io["trials"]] == [0, 1, 2]


BAD = [
    (["resnet5"], "did you mean"),
    (["no_such_pkg.mod:make"], "cannot import"),
    (["tests.toy_models:not_a_module"], "not a torch.nn.Module"),
    (["resnet18", "--input-shape", "3,x,64"], "malformed input shape"),
    (["resnet18", "--batch-sizes", "0,4"], "must be > 0"),
    (["resnet18", "--device", "gpu"], "expected cpu, cuda or cuda:N"),
    (["resnet18", "--device", "cuda:x"], "expected cpu, cuda or cuda:N"),
    (["resnet18", "--input-shape", "3,32"], "does not take --input-shape 3,32"),
    (["resnet18", "--batch-sizes", "4,-2"], "must be > 0"),
    (["tests.toy_models:mlp", "--input-shape", "6", "--memory-budget", "1MiB",
      "--batch-sizes", "1"], "too small for batch 1"),
]


@pytest.mark.parametrize("argv,message", BAD)
def test_bad_input_is_one_line_exit_2(argv, message, tmp_path, capsys):
    assert main(["profile", *argv, "--out", str(tmp_path / "p.json"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda(tmp_path, capsys):
    for device in ("cuda", "cuda:1"):
        assert main(["profile", "resnet18", "--device", device, "--out",
                     str(tmp_path / "p.json")]) == 2
        assert "CUDA is not available" in capsys.readouterr().err


def test_bad_data_folders(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("")
    for folder, message in ((tmp_path / "missing", "no such folder"),
                            (tmp_path / "empty", "no images found"),
                            (tmp_path / "file.txt", "not a folder")):
        assert main(["profile", "resnet18", "--data", str(folder), "--quiet"]) == 2
        assert message in capsys.readouterr().err


@pytest.mark.slow
def test_json_output(tmp_path, capsys):
    assert main(["profile", MLP.model, "--input-shape", "6", "--num-classes", "3",
                 "--batch-sizes", "2", "--algorithms", "none", "--json",
                 "--out", str(tmp_path / "p.json")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "scalelab.profile/1" and data["batches"][0]["batch_size"] == 2




BN = WorkloadSpec("tests.toy_profiler_models:bn_cnn", input_shape=(3, 8, 8), num_classes=4)


@pytest.mark.slow
def test_batchnorm_at_batch_1_is_passed_over_and_the_search_goes_on():
    prof = run_profile(BN, ProfileOptions(max_batch=8, algorithms="none", steps=1))
    (u,) = prof["untrainable_batches"]
    assert u["batch_size"] == 1 and "does not train at batch 1" in u["reason"]
    assert "Expected more than 1 value per channel" in u["reason"]
    assert prof["batches"][0]["batch_size"] == 2 and prof["max_batch_size"] == 8
    # Fewer timed steps than the default only when asked, and then said.
    assert prof["timed_steps"] == 1
    assert any("1 timed step(s) per trial (as asked; default 5)" in w for w in prof["warnings"])


@pytest.mark.slow
def test_listed_batch_that_does_not_train_is_noted(tmp_path, capsys):
    assert main(["profile", BN.model, "--input-shape", "3,8,8", "--num-classes", "4",
                 "--batch-sizes", "1,2", "--algorithms", "none", "--steps", "1",
                 "--out", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "does not train at batch 1" in out
    assert [r["batch_size"] for r in read_json(tmp_path / "p.json", "profile")["batches"]] == [2]


@pytest.mark.slow
def test_a_model_that_trains_at_no_batch_tried_is_one_line_exit_2(tmp_path, capsys):
    assert main(["profile", "tests.toy_profiler_models:pairs_only", "--input-shape", "6",
                 "--num-classes", "3", "--batch-sizes", "3,4", "--steps", "1", "--quiet",
                 "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "does not train at any batch tried (3, 4)" in err and err.count("\n") == 1


def test_steps_default_to_five():
    from scalelab.cli import build_parser

    assert ProfileOptions().steps == 5 and ProfileOptions().timed_steps == 5
    assert build_parser().parse_args(["profile", "resnet18"]).steps == 5


@pytest.mark.slow
def test_a_busy_machine_is_recorded_so_callers_can_refuse_to_cache(monkeypatch):
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (7.5, 3.0, 1.0))
    prof = run_profile(MLP, ProfileOptions(batch_sizes=[2], algorithms="none", steps=1))
    assert prof["machine_busy"] is True and prof["environment"]["loadavg_before"] == 7.5
    assert any("busy" in w for w in prof["warnings"])


def test_a_quiet_machine_is_not_busy(monkeypatch):
    import os

    from scalelab.profiler.profile import _environment

    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.1, 0.1))
    assert _environment(torch.device("cpu"), 0.2)["busy"] is False
    assert _environment(torch.device("cpu"), 1.5)["busy"] is True
