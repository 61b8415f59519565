"""scalelab compare: the ablation order, baseline files, bad input, and a measured comparison."""

import json

import pytest

from scalelab.cli import main
from scalelab.errors import UsageError
from scalelab.experiment.compare import ORDER, StepConfig, ablation, baseline_config, load_baseline
from scalelab.results import read_json

TOY = ["tests.toy_compare:wide_fc", "--input-shape", "3,16,16", "--num-classes", "10"]


def _cli(capsys, *argv):
    code = main(["compare", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_ablation_applies_recommendations_in_the_papers_order():
    base = baseline_config()
    rec = StepConfig(batch_size=64, ps=2, partition="balanced")
    steps, skipped = ablation(base, rec)
    assert [s.name for s in steps] == ["baseline", "batch+algorithm", "servers", "recommended"]
    assert [s.config.batch_size for s in steps] == [16, 64, 64, 64]
    assert [s.config.ps for s in steps] == [1, 1, 2, 2]
    assert [s.config.partition for s in steps] == ["tensor", "tensor", "tensor", "balanced"]
    assert steps[-1].config == rec and steps[-1].applied == {"partition": "balanced",
                                                             "step": "balanced shards"}
    assert [s["name"] for s in skipped] == ["loaders"]
    assert ORDER.index("batch+algorithm") < ORDER.index("loaders") < ORDER.index("servers")


def test_ablation_skips_what_the_baseline_has_and_two_ends():
    base = baseline_config({"ps": 2, "partition": "balanced"})
    rec = StepConfig(batch_size=32, ps=2, partition="balanced")
    steps, skipped = ablation(base, rec)
    assert [s.name for s in steps] == ["baseline", "recommended"]
    assert steps[-1].applied == {"batch_size": 32, "step": "batch+algorithm"}
    assert {s["name"] for s in skipped} == {"loaders", "servers", "balanced shards"}
    ends, _ = ablation(baseline_config(), StepConfig(batch_size=64, ps=2, partition="balanced"),
                       one_at_a_time=False)
    assert [s.name for s in ends] == ["baseline", "recommended"]
    assert ends[1].applied == {"batch_size": 64, "ps": 2, "partition": "balanced"}


def test_baseline_file_overrides_keys(tmp_path):
    f = tmp_path / "base.toml"
    f.write_text('batch_size = 8\npartition = "balanced"\n')
    cfg = load_baseline(f)
    assert (cfg.batch_size, cfg.ps, cfg.partition, cfg.loader_workers) == (8, 1, "balanced", 0)
    with pytest.raises(UsageError, match="ps must be an integer >= 1"):
        baseline_config({"ps": 0})
    with pytest.raises(UsageError, match="partition"):
        baseline_config({"partition": "random"})


@pytest.mark.parametrize("content, message", [
    ("batch_size = 8\nnum_servers = 2\n", "unknown key(s) num_servers"),
    ("batch_size = [", "not valid TOML"),
    ('algorithm = "channels_last"\n', "default computation configuration"),
    ("batch_size = 0\n", "batch_size must be an integer >= 1"),
])
def test_bad_baseline_file_is_one_line_exit_2(capsys, tmp_path, content, message):
    f = tmp_path / "base.toml"
    f.write_text(content)
    code, out, err = _cli(capsys, *TOY, "--workers", "2", "--baseline", str(f))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


@pytest.mark.parametrize("argv, message", [
    (["--workers", "0"], "--workers must be an integer >= 2"),
    (["--workers", "2", "--rate", "10kbit"], "cannot be shaped"),
    (["--workers", "2", "--rate", "20tbit"], "not a rate"),
    (["--workers", "2", "--rate", "100gbit"], "cannot be shaped"),
    (["--workers", "2", "--batch-sizes", "16,x"], "--batch-sizes"),
    (["--workers", "2", "--baseline", "/nonexistent/base.toml"], "no such file"),
    (["--workers", "2", "--plot", "out.svg"], "PNG"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, message):
    code, out, err = _cli(capsys, *TOY, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.netem
def test_recommended_is_measured_faster_on_a_communication_bound_network(capsys, tmp_path):
    out, png, html = tmp_path / "compare.json", tmp_path / "compare.png", tmp_path / "r.html"
    code, text, err = _cli(capsys, *TOY, "--workers", "2", "--rate", "100mbit", "--steps", "4",
                           "--warmup-steps", "1", "--batch-sizes", "16", "--no-ablation",
                           "--reuse-profiles",
                           "--out", str(out), "--plot", str(png), "--quiet")
    assert code == 0, err
    result = read_json(out, "compare")
    steps = result["steps"]
    assert [s["name"] for s in steps] == ["baseline", "recommended"]
    base, rec = steps
    assert base["config"]["batch_size"] == rec["config"]["batch_size"] == 16
    assert base["config"]["ps"] == 1 and base["config"]["partition"] == "tensor"
    # one server per worker, even shards: what the planner says for 2 workers on this link
    assert rec["config"]["partition"] == "balanced" and rec["config"]["ps"] == 2
    # the exchange dominates the step at 100 Mbit/s: the model says so, and so does the run
    assert base["predicted"]["bottleneck"].startswith(("network", "shard"))
    assert rec["measured_samples_per_s"] > base["measured_samples_per_s"]
    assert rec["speedup"] > 1 and rec["predicted_speedup"] > 1
    for s in steps:
        assert s["error"] == pytest.approx(
            s["predicted_samples_per_s"] / s["measured_samples_per_s"] - 1)
    assert 0.5 * 100e6 / 8 < result["link"]["bandwidth_Bps"] < 1.1 * 100e6 / 8
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["report", str(out), "--out", str(html), "--quiet"]) == 0
    page = html.read_text()
    assert "Naive against recommended" in page and "data:image/png;base64," in page
    assert json.loads(out.read_text())["schema"] == "scalelab.compare/1"


def test_compared_steps_are_dataclasses_with_the_file_form():
    import dataclasses

    from scalelab.experiment.case import CaseInputs
    from scalelab.experiment.compare import ComparedStep, Comparison, _with_speedups

    inputs = CaseInputs("ps", 2, 1, "tensor", 1e6, (600000, 400000), 0.05, 1.2, 12.5e6, 1e-4,
                        False)

    def step(name, pred, meas):
        return ComparedStep(name=name, applied={}, config={"batch_size": 16},
                            predicted_samples_per_s=pred, measured_samples_per_s=meas,
                            error=pred / meas - 1, predicted={}, measured={}, inputs=inputs)

    steps = _with_speedups([step("baseline", 40.0, 50.0), step("recommended", 100.0, 80.0)])
    assert [s.speedup for s in steps] == [1.0, 1.6]
    assert [s.predicted_speedup for s in steps] == [1.0, 2.5]
    d = steps[1].to_dict()
    assert d["inputs"]["tensor_bytes"] == [600000, 400000] and d["speedup"] == 1.6
    c = Comparison(model="m", workload={}, workers=2, rate=None, rate_bps=None, link={},
                   environment={}, baseline={}, recommended={}, recommendation={}, profile={},
                   contention=[], plan_compute_s=0.06, options={}, steps=steps, skipped=[],
                   notes=[])
    cd = json.loads(json.dumps(c.to_dict()))
    assert [s["name"] for s in cd["steps"]] == ["baseline", "recommended"]
    assert cd["plan_compute_s"] == 0.06
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.workers = 4


def test_exposed_input_on_this_host_uses_the_idle_cores():
    from scalelab.experiment.loaders import exposed_input_s

    # no loader process: all of t_load shows, whatever the cores
    assert exposed_input_s(0.1, 0, 0.05, 0.02, cores=4) == pytest.approx(0.1)
    # one core for a worker (20 ms of compute in a 50 ms step) and its loaders: 100 ms of
    # decoding needs 120 ms of that core per step, 70 ms more than the step
    assert exposed_input_s(0.1, 3, 0.05, 0.02, cores=1) == pytest.approx(0.07)
    # 20 ms of decoding fits in the 30 ms the worker waits for its exchange: hidden
    assert exposed_input_s(0.02, 1, 0.05, 0.02, cores=1) == 0.0
    # cores to spare: one loader delivers a batch every t_load
    assert exposed_input_s(0.1, 1, 0.05, 0.02, cores=8) == pytest.approx(0.05)
    assert exposed_input_s(0.1, 2, 0.05, 0.02, cores=8) == 0.0


def test_the_fed_step_measured_is_a_floor_under_the_loader_step():
    from types import SimpleNamespace

    from scalelab.experiment.case import CaseInputs
    from scalelab.experiment.loaders import cores_per_worker, exposed_input_s, step_input

    inputs = CaseInputs(architecture="ps", workers=2, ps=1, partition="balanced",
                        param_bytes=1e6, tensor_bytes=(), compute_s=0.03, contention=1.0,
                        bandwidth_Bps=1e8, latency_s=1e-4, full_duplex=True)
    io = {"load_s_per_sample": 0.5e-3}  # t_load 32 ms at batch 64
    cores = cores_per_worker(2)
    with_loader = SimpleNamespace(batch_size=64, loader_workers=1)
    ideal = step_input(with_loader, io, inputs, 2, 0.05)
    assert ideal["fed_step_s"] is None and ideal["load_s_per_batch"] == pytest.approx(0.032)
    # without a measured floor: the ideal step of shared cores
    assert ideal["io_s"] == pytest.approx(exposed_input_s(0.032, 1, 0.05,
                                                          ideal["compute_cpu_s"], cores))
    assert ideal["ideal_step_s"] == pytest.approx(0.05 + ideal["io_s"])
    slower = step_input(with_loader, io, inputs, 2, 0.05, fed_step_s=0.09)
    assert slower["ideal_step_s"] == pytest.approx(ideal["ideal_step_s"])
    assert slower["fed_step_s"] == 0.09 and slower["io_s"] == pytest.approx(0.04)
    faster = step_input(with_loader, io, inputs, 2, 0.05, fed_step_s=0.01)
    assert faster["io_s"] == pytest.approx(ideal["io_s"])
    # no loaders: the worker decodes before it computes, and a fed step is not used
    inline = step_input(SimpleNamespace(batch_size=64, loader_workers=0), io, inputs, 2, 0.05,
                        fed_step_s=0.5)
    assert inline["fed_step_s"] is None and inline["io_s"] == pytest.approx(0.032)
    assert step_input(with_loader, None, inputs, 2, 0.05, fed_step_s=0.09) is None


def test_bad_data_folder_is_one_line_exit_2(capsys, tmp_path):
    code, out, err = _cli(capsys, *TOY, "--workers", "2", "--data", str(tmp_path / "none"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "no such folder" in err


@pytest.mark.dist
def test_compare_on_an_image_folder_runs_the_loader_step(capsys, tmp_path):
    import torch

    from scalelab.experiment.loaders import exposed_input_s
    from scalelab.imagefolder import write_image_folder

    torch.set_num_threads(1)
    write_image_folder(tmp_path / "imgs", images=48, size_px=64, classes=4, seed=0)
    base = tmp_path / "base.toml"
    base.write_text('partition = "balanced"\n')
    out = tmp_path / "compare.json"
    code, _, err = _cli(capsys, "tests.toy_compare:smallconv", "--input-shape", "3,32,32",
                        "--num-classes", "4", "--workers", "2", "--data", str(tmp_path / "imgs"),
                        "--baseline", str(base), "--batch-sizes", "16", "--steps", "4",
                        "--warmup-steps", "1", "--reuse-profiles", "--out", str(out),
                        "--quiet")
    assert code == 0, err
    result = read_json(out, "compare")
    io = result["profile"]["io"]
    assert io["load_s_per_sample"] > 0 and io["loader_workers_needed"] >= 1
    loaders = result["recommended"]["loader_workers"]
    assert loaders == result["recommendation"]["loader_workers"] >= 1
    assert "loaders" not in {s["name"] for s in result["skipped"]}
    steps = result["steps"]
    assert steps[0]["config"]["loader_workers"] == 0
    step = next(s for s in steps if "loader_workers" in s["applied"])
    assert step["config"]["loader_workers"] == step["applied"]["loader_workers"] == loaders
    for s in (steps[0], step):
        inp = s["predicted"]["input"]
        assert inp["loader_workers"] == s["config"]["loader_workers"]
        assert inp["load_s_per_batch"] == pytest.approx(
            16 * io["load_s_per_sample"] * s["inputs"]["contention"])
        compute_s = s["inputs"]["compute_s"] * s["inputs"]["contention"]
        without_input = s["predicted"]["step_s"] - s["predicted"]["io_s"]
        assert inp["ideal_step_s"] == pytest.approx(without_input + exposed_input_s(
            inp["load_s_per_batch"], inp["loader_workers"], without_input,
            inp["compute_cpu_s"], inp["cores_per_worker"]))
        # with loaders, the step measured with every worker fed by its loaders is a floor
        assert (inp["fed_step_s"] is None) == (inp["loader_workers"] == 0)
        assert s["predicted"]["step_s"] == pytest.approx(
            max(inp["ideal_step_s"], inp["fed_step_s"] or 0.0))
        assert s["predicted"]["step_s"] >= compute_s + s["predicted"]["io_s"]
        assert s["measured_samples_per_s"] > 0 and s["measured"]["data_s"] is not None
    # the baseline decodes in the worker: the whole t_load is predicted to show
    assert steps[0]["predicted"]["io_s"] == pytest.approx(
        steps[0]["predicted"]["input"]["load_s_per_batch"])


@pytest.mark.dist
def test_fed_timing_runs_every_worker_with_its_loaders(tmp_path):
    import statistics

    from scalelab.errors import RunFailure
    from scalelab.experiment.measure import fed_step_of, time_fed_concurrently
    from scalelab.imagefolder import write_image_folder
    from scalelab.workload import WorkloadSpec

    write_image_folder(tmp_path / "imgs", images=32, size_px=48, classes=4, seed=0)
    spec = WorkloadSpec("tests.toy_compare:smallconv", input_shape=(3, 32, 32), num_classes=4)
    got = time_fed_concurrently(spec, str(tmp_path / "imgs"), 8, 2, 1, 1, steps=3)
    assert len(got) == 2
    for t in got:
        assert t["loader_workers"] == 1 and t["timed_steps"] == 3
        assert t["data_s"] >= 0 and min(t["forward_s"], t["backward_s"]) > 0
        assert t["step_s"] >= max(t["forward_s"], t["backward_s"])
    assert fed_step_of(got, "ps") == pytest.approx(statistics.median(
        t["data_s"] + t["forward_s"] + t["backward_s"] for t in got))
    with pytest.raises(RunFailure, match="not a folder"):
        time_fed_concurrently(spec, str(tmp_path / "none"), 8, 2, 1, 1, steps=3)


def test_a_sharded_recommendation_is_the_last_step_and_has_no_servers():
    from types import SimpleNamespace

    from scalelab.experiment.compare import _case, _recommended

    base = baseline_config()
    rec = _recommended(SimpleNamespace(layout="zero2", batch_size=64, algorithm=None,
                                       loader_workers=0), 2, base)
    assert (rec.architecture, rec.zero, rec.ps, rec.partition) == ("fsdp", 2, 1, "tensor")
    steps, skipped = ablation(base, rec)
    assert [s.name for s in steps] == ["baseline", "batch+algorithm", "recommended"]
    assert steps[-1].applied == {"architecture": "fsdp", "zero": 2, "step": "layout"}
    assert steps[1].config.architecture == "ps"
    assert {s["name"]: s["reason"] for s in skipped}["servers"].endswith(
        "has no parameter servers")
    case = _case(rec, 2, "300mbit")
    assert (case["architecture"], case["zero"], case["ps"]) == ("fsdp", 2, None)
    plain = _recommended(SimpleNamespace(layout="ddp", batch_size=64, algorithm=None,
                                         loader_workers=0), 2, base)
    assert (plain.architecture, plain.zero, plain.ps, plain.partition) == ("ps", None, 2,
                                                                           "balanced")
    with pytest.raises(UsageError, match="zero"):
        StepConfig(architecture="fsdp")


@pytest.mark.netem
def test_compare_trains_the_plans_sharded_layout_with_fsdp(capsys, tmp_path):
    out = tmp_path / "compare.json"
    code, text, err = _cli(capsys, *TOY, "--workers", "2", "--rate", "300mbit", "--steps", "4",
                           "--warmup-steps", "1", "--batch-sizes", "16", "--no-ablation",
                           "--reuse-profiles", "--layout", "zero2", "--out", str(out),
                           "--quiet")
    assert code == 0, err
    result = read_json(out, "compare")
    assert result["recommendation"]["layout"] == "zero2"
    base, rec = result["steps"]
    assert base["config"]["architecture"] == "ps"
    assert rec["config"]["architecture"] == "fsdp" and rec["config"]["zero"] == 2
    assert rec["inputs"]["zero"] == 2 and rec["inputs"]["link_exchange_s"] > 0
    assert "ZeRO-2" in rec["predicted"]["form"]
