import dataclasses
import json

import pytest

from scalelab import netem
from scalelab.cli import main
from scalelab.errors import UsageError
from scalelab.experiment.case import predict_case as predict
from scalelab.experiment.validate import expand, parse_grid
from scalelab.plan import ModelParams
from scalelab.results import write_json

TINY = ["tests.toy_validate:tiny", "--input-shape", "12", "--num-classes", "4"]


def test_parse_grid_and_expand():
    grid = parse_grid("workers=2,4 ps=1,2 architecture=ps,allreduce rate=200mbit,none "
                      "batch-size=8")
    assert grid == {"workers": [2, 4], "ps": [1, 2], "architecture": ["ps", "allreduce"],
                    "rate": ["200mbit", None], "batch_size": [8]}
    cases = expand(grid)
    # ps: 2 workers x 2 servers x 2 rates; all-reduce has no servers: 2 x 2
    assert len(cases) == 12
    assert {"workers": 2, "ps": None, "architecture": "allreduce", "partition": None,
            "batch_size": 8, "rate": None} in cases
    assert expand(parse_grid("workers=2"))[0] == {
        "workers": 2, "ps": 1, "architecture": "ps", "partition": "balanced", "batch_size": 32,
        "rate": None}


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("workers", "KEY=V1,V2"),
    ("workers=", "KEY=V1,V2"),
    ("speed=2", "unknown grid key"),
    ("workers=0", ">= 1"),
    ("workers=two", "not an integer"),
    ("workers=2,,4", "empty value"),
    ("architecture=ring", "one of ps, allreduce"),
    ("rate=fast", "not a rate"),
    ("rate=100gbit", "cannot be shaped"),
    ("workers=2 workers=4", "given twice"),
])
def test_bad_grids(text, message):
    with pytest.raises(UsageError, match=message):
        parse_grid(text)


def _inputs(**kw):
    base = {"architecture": "ps", "workers": 2, "ps": 1, "partition": "balanced",
            "param_bytes": 1e5, "tensor_bytes": [], "compute_s": 0.1, "contention": 1.5,
            "bandwidth_Bps": 1e6, "latency_s": 0.0, "full_duplex": False, "floor_step_s": 0.0,
            "compute_floor_s": 0.0}
    return {**base, **kw}


def test_prediction_is_the_planners_push_then_pull_with_the_measured_contention():
    # push phase: the server receives 2 x 100 kB at 1 MB/s = 0.2 s (its link bounds it);
    # pull likewise; compute 0.1 s x contention 1.5
    p = predict(_inputs())
    assert p.compute_s == pytest.approx(0.15)
    assert p.comm_s == pytest.approx(0.4)
    assert p.step_s == pytest.approx(0.55)
    assert p.bottleneck == "network-server"
    # two servers: each receives 100 kB, as much as a worker sends: 0.1 s per phase
    assert predict(_inputs(ps=2)).comm_s == pytest.approx(0.2)
    # calibrated: half the exchange hidden, compute factor on top of the contention
    cal = predict(_inputs(), ModelParams(overlap=0.5, compute_scale=2.0, latency_s=0.01))
    assert cal.compute_s == pytest.approx(0.3)
    assert cal.step_s == pytest.approx(0.3 + 0.5 * (0.4 + 2 * 0.01))
    # ring all-reduce over 4: 2 (3/4) 100 kB / 1 MB/s
    ar = predict(_inputs(architecture="allreduce", workers=4, ps=0, contention=1.0))
    assert ar.comm_s == pytest.approx(0.15)


def test_loopback_probe_measures_something():
    link = netem.measure_loopback(seconds=0.2, pings=5)
    assert link["bandwidth_Bps"] > 1e6 and 0 < link["latency_s"] < 0.01
    with pytest.raises(UsageError):
        netem.measure_loopback(seconds=0)


@pytest.mark.parametrize("extra, message", [
    (["--grid", "workers=0"], ">= 1"),
    (["--grid", "workers=2 foo=1"], "unknown grid key"),
    (["--grid", "workers=2", "--steps", "1"], "--steps must be >= 2"),
    (["--grid", "workers=2", "--plot", "out.jpg"], "PNG"),
    (["--grid", "workers=2 ps=0"], ">= 1"),
])
def test_cli_bad_input_exits_2_in_one_line(tmp_path, capsys, extra, message):
    assert main(["validate", *TINY, *extra, "--out", str(tmp_path / "v.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "v.json").exists()


def test_cli_bad_model_and_calibration_file(tmp_path, capsys):
    assert main(["validate", "no_such_model", "--grid", "workers=2",
                 "--out", str(tmp_path / "v.json")]) == 2
    assert "no_such_model" in capsys.readouterr().err
    other = tmp_path / "plan.json"
    write_json(other, "plan", {"sweep": []})
    assert main(["validate", *TINY, "--grid", "workers=2", "--calibration", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert "calibration" in err and len(err.splitlines()) == 1


def test_fitted_cases_match_whatever_the_rate_spelling():
    from scalelab.experiment.validate import config_key

    a = {"workers": 2, "ps": 1, "architecture": "ps", "partition": "balanced",
         "batch_size": 8, "rate": "1gbit"}
    assert config_key(a) == config_key({**a, "rate": "1000mbit"})
    assert config_key(a) != config_key({**a, "ps": 2})
    ar = {**a, "architecture": "allreduce"}
    assert config_key(ar) == config_key({**ar, "ps": None, "partition": None})


def test_case_inputs_are_typed_and_round_trip_through_the_file_form():
    from scalelab.experiment.case import CaseInputs

    d = _inputs(tensor_bytes=[60000, 40000])
    inputs = CaseInputs.from_dict(d)
    assert inputs.worker_compute_s == pytest.approx(0.15)
    assert inputs.tensor_bytes == (60000, 40000)
    assert inputs.to_dict() == {**d, "tensor_bytes": [60000, 40000]}
    assert predict(inputs).step_s == predict(d).step_s
    with pytest.raises(ValueError, match="bandwidth_Bps must be > 0, got 0"):
        dataclasses.replace(inputs, bandwidth_Bps=0.0)
    with pytest.raises(ValueError, match="ps >= 1"):
        dataclasses.replace(inputs, ps=0)
    with pytest.raises(UsageError, match="incomplete"):
        CaseInputs.from_dict({k: v for k, v in d.items() if k != "compute_s"})


def test_the_exchange_form_comes_from_the_run_configuration():
    from scalelab.experiment.case import full_duplex_of
    from scalelab.runner import RunConfig
    from scalelab.workload import WorkloadSpec

    spec = WorkloadSpec("tests.toy_validate:tiny", input_shape=(12,), num_classes=4)
    # one message per shard (the default): a server answers once it has every worker's shard
    assert not full_duplex_of(RunConfig(workload=spec, workers=2, ps=1).exchange_form)
    assert full_duplex_of(RunConfig(workload=spec, workers=2, ps=1,
                                    piece_bytes=4096).exchange_form)
    assert not full_duplex_of(RunConfig(workload=spec, workers=2,
                                        architecture="allreduce").exchange_form)
    # pipelined: both directions at once, one phase instead of push then pull
    assert predict(_inputs(full_duplex=True)).comm_s < predict(_inputs()).comm_s


def test_validation_results_are_dataclasses_with_the_file_form():
    from scalelab.experiment.case import CaseInputs
    from scalelab.experiment.validate import Validation, ValidationCase

    config = {"workers": 2, "ps": 1, "architecture": "ps", "partition": "balanced",
              "batch_size": 8, "rate": None}
    case = ValidationCase(
        config=config, predicted_step_s=0.5, measured_step_s=0.4, error=0.25,
        predicted_compute_s=0.1, measured_compute_s=0.12, predicted_exchange_s=0.4,
        measured_exchange_s=0.3, predicted_samples_per_s=32.0, measured_samples_per_s=40.0,
        bottleneck="network-server", form="pipelined (full-duplex)",
        inputs=CaseInputs.from_dict(_inputs()), achieved_bandwidth_Bps=None, steps_timed=8,
        model="m", one_worker_step_s=0.2)
    d = case.to_dict()
    assert "calibrated_step_s" not in d and "used_for_fitting" not in d
    assert d["inputs"] == _inputs()
    cal = dataclasses.replace(case, calibrated_step_s=0.45, calibrated_error=0.125,
                              used_for_fitting=False).to_dict()
    assert cal["calibrated_error"] == 0.125 and cal["used_for_fitting"] is False
    v = Validation(workload={}, cases=(case,), median_abs_error=0.25, max_abs_error=0.25,
                   link={}, profile=[], contention=[], exchange_form="x")
    vd = json.loads(json.dumps(v.to_dict()))
    assert "calibration" not in vd and vd["cases"][0]["error"] == 0.25


def test_colocated_servers_on_some_of_the_hosts_are_a_grid_key_and_a_prediction():
    grid = parse_grid("workers=3 ps=1,2 ps_placement=colocated,dedicated rate=200mbit")
    cases = expand(grid)
    assert len(cases) == 4 and {c["ps_placement"] for c in cases} == {"colocated", "dedicated"}
    # without the key a case's config is what it always was
    assert "ps_placement" not in expand(parse_grid("workers=2"))[0]
    with pytest.raises(UsageError, match="one of dedicated, colocated"):
        parse_grid("ps_placement=elsewhere")
    # 1 server on host 0 of 3: host 0's link takes the other two pushes (2 x 100 kB at
    # 1 MB/s = 0.2 s a phase), where a dedicated server's takes all three (0.3 s)
    co = predict(_inputs(workers=3, colocated=True))
    dedicated = predict(_inputs(workers=3))
    assert co.comm_s == pytest.approx(0.4) and dedicated.comm_s == pytest.approx(0.6)
    assert co.bottleneck == "network-server"
    # 2 servers on 3 hosts: a server's host takes 2 x 50 kB in, a host without one sends
    # its whole 100 kB out: 0.1 s a phase either way
    assert predict(_inputs(workers=3, ps=2, colocated=True)).comm_s == pytest.approx(0.2)


def test_summary_lines_say_whether_any_case_was_held_out():
    from scalelab.cli.validate import summary_lines

    def validation(held: int) -> dict:
        before = {"cases": held, "median_abs_error": 0.08, "max_abs_error": 0.12}
        after = {"cases": held, "median_abs_error": 0.03, "max_abs_error": 0.05}
        return {"link": {"400mbit": {"bandwidth_Bps": 48e6, "latency_s": 3e-5}},
                "median_abs_error": 0.05, "max_abs_error": 0.12, "cases": [{}, {}],
                "calibration": {"held_out_before": before, "held_out_after": after}}

    every = summary_lines(validation(0))
    assert "link 400mbit: 384.0 Mbit/s measured, latency 30 us" in every
    assert "|error| of the step time: median 5.0%, max 12.0% (2 cases)" in every
    assert "every case was used for fitting the calibration: no held-out error" in every
    some = summary_lines(validation(1))
    assert ("cases not used for fitting (1): median |error| 8.0% -> 3.0% calibrated, "
            "max 12.0% -> 5.0%") in some
    assert not any("every case" in line for line in some)
