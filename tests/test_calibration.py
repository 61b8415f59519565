import pytest

from scalelab import calibration
from scalelab.cli import main
from scalelab.errors import UsageError
from scalelab.planner import ModelParams, load_calibration
from scalelab.results import read_json, write_json
from scalelab.validate import predict

TRUE = ModelParams(bandwidth_efficiency=0.8, latency_s=0.002, overlap=0.3, compute_scale=1.1)


def _inputs(arch, w, p, bandwidth_Bps, compute_s, param_bytes=4e6, contention=1.0):
    return {"architecture": arch, "workers": w, "ps": p, "partition": "balanced",
            "param_bytes": param_bytes, "tensor_bytes": [], "compute_s": compute_s,
            "contention": contention, "bandwidth_Bps": bandwidth_Bps, "latency_s": 1e-5,
            "full_duplex": False}


def _cases(params):
    """Cases spanning compute- and network-bound steps, measured as ``params`` predicts."""
    grid = [("ps", 2, 1, 25e6, 0.05), ("ps", 2, 2, 25e6, 0.05), ("ps", 4, 1, 25e6, 0.05),
            ("ps", 4, 4, 62.5e6, 0.05), ("ps", 2, 1, 125e6, 0.4), ("allreduce", 2, 0, 25e6, 0.05),
            ("allreduce", 4, 0, 125e6, 0.4), ("ps", 4, 2, 125e6, 0.2, 4e5, 1.9),
            ("allreduce", 4, 0, 1e9, 0.3, 4e5, 2.0)]
    out = []
    for arch, w, p, bw, comp, *rest in grid:
        inputs = _inputs(arch, w, p, bw, comp, *rest)
        config = {"workers": w, "ps": p or None, "architecture": arch, "partition": None,
                  "batch_size": 8, "rate": f"{bw * 8 / 1e6:g}mbit"}
        out.append({"config": config, "inputs": inputs,
                    "measured_step_s": predict(inputs, params).step_s})
    return out


def test_fit_recovers_known_parameters():
    obs = calibration.observations_from_validation({"cases": _cases(TRUE)})
    fit = calibration.fit(obs)
    got = fit.params
    assert got.bandwidth_efficiency == pytest.approx(0.8, rel=0.03)
    assert got.latency_s == pytest.approx(0.002, abs=5e-4)
    assert got.overlap == pytest.approx(0.3, abs=0.03)
    assert got.compute_scale == pytest.approx(1.1, rel=0.03)
    assert fit.after["max_abs_error"] < 0.01
    assert fit.before["max_abs_error"] > 0.1


def test_fit_stays_neutral_when_the_model_already_agrees():
    obs = calibration.observations_from_validation({"cases": _cases(ModelParams())})
    fit = calibration.fit(obs)
    assert fit.params.bandwidth_efficiency == pytest.approx(1.0, abs=0.01)
    assert fit.params.latency_s == pytest.approx(0.0, abs=1e-4)
    assert fit.params.overlap == pytest.approx(0.0, abs=0.01)
    assert fit.params.compute_scale == pytest.approx(1.0, abs=0.01)


def test_only_free_parameters_move():
    obs = calibration.observations_from_validation({"cases": _cases(TRUE)})
    fit = calibration.fit(obs, ("bandwidth_efficiency",))
    assert fit.params.overlap == 0.0 and fit.params.compute_scale == 1.0
    assert fit.params.latency_s == 0.0
    with pytest.raises(UsageError, match="unknown parameter"):
        calibration.fit(obs, ("bogus",))


def _run_json(**overrides):
    cfg = {"workload": {"model": "tests.toy_validate:tiny", "input_shape": [12],
                        "num_classes": 4, "optimizer": "sgd", "lr": 0.01, "momentum": 0.9,
                        "loss": "cross_entropy"},
           "workers": 2, "ps": 1, "architecture": "ps", "mode": "sync", "batch_size": 4,
           "partition": "balanced", "emulate_network": "200mbit", "piece_bytes": None}
    cfg.update(overrides)
    stat = {"median": 0.01, "p10": 0.01, "p90": 0.01, "spread": 0.0, "n": 4}
    return {"config": cfg, "param_bytes": 1808,
            "steps": {"step_s": {**stat, "median": 0.02}, "compute_s": stat}}


def test_run_files_use_their_own_compute_and_the_nominal_rate():
    o = calibration.observation_from_run(_run_json(), "run.json")
    assert o.inputs["bandwidth_Bps"] == 25e6
    assert o.inputs["compute_s"] == 0.01 and o.inputs["contention"] == 1.0
    assert o.measured_step_s == 0.02
    assert o.config["rate"] == "200mbit"
    with pytest.raises(UsageError, match="loopback"):
        calibration.observation_from_run(_run_json(emulate_network=None), "r.json")
    with pytest.raises(UsageError, match="all-reduce"):
        calibration.observation_from_run(_run_json(architecture="allreduce", ps=0), "r.json")
    with pytest.raises(UsageError, match="synchronous"):
        calibration.observation_from_run(_run_json(mode="async"), "r.json")


def test_cli_writes_a_calibration_that_plan_reads(tmp_path, capsys):
    v = tmp_path / "validation.json"
    write_json(v, "validation", {"cases": _cases(TRUE)})
    out = tmp_path / "calibration.json"
    assert main(["calibrate", str(v), "--out", str(out), "--quiet"]) == 0
    doc = read_json(out, "calibration")
    assert set(doc["params"]) == set(ModelParams().to_dict())
    assert len(doc["fitted_cases"]) == 9
    assert load_calibration(out).bandwidth_efficiency == pytest.approx(0.8, rel=0.03)


@pytest.mark.parametrize("args, message", [
    (["--free", "speed"], "unknown parameter"),
    (["--free", ","], "names no parameter"),
])
def test_cli_bad_free_parameters(tmp_path, capsys, args, message):
    v = tmp_path / "validation.json"
    write_json(v, "validation", {"cases": _cases(TRUE)})
    assert main(["calibrate", str(v), *args, "--out", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_cli_bad_files(tmp_path, capsys):
    prof = tmp_path / "plan.json"
    write_json(prof, "plan", {"sweep": []})
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    incomplete = tmp_path / "v.json"
    write_json(incomplete, "validation", {"cases": [{"config": {}}]})
    for path in (prof, broken, incomplete, tmp_path / "missing.json"):
        assert main(["calibrate", str(path), "--out", str(tmp_path / "c.json")]) == 2, path
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "c.json").exists()
