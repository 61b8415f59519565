"""``scalelab plan`` end to end, in process: outputs, files, and every bad input."""

from __future__ import annotations

import json

import pytest

from scalelab.cli import main
from scalelab.results import read_json, write_json
from tests.toy_plan import write_profile

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


def _run(capsys, *argv):
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def profile(tmp_path):
    return write_profile(tmp_path / "profile.json", step_s=0.2, batch=32)


@pytest.fixture
def workload(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text("param_bytes = 180_000_000\nbatch_size = 32\nstep_s = 0.3\n")
    return p


def test_plan_from_profile_with_example_cluster(capsys, tmp_path, profile):
    out = tmp_path / "plan.json"
    code, text, err = _run(capsys, "--profile", str(profile), "--cluster",
                           str(EXAMPLES / "cluster-4x8-a100-100gbe.toml"), "--out", str(out))
    assert code == 0, err
    assert "recommend" in text and "predicted data-parallel scaling" in text
    data = read_json(out, "plan")
    assert data["estimate"] is True  # a CPU profile planned for A100s
    assert data["recommendation"]["reasons"]
    assert max(r["gpus"] for r in data["sweep"]) == 32
    assert "assumption" in err


@pytest.mark.parametrize("name", ["cluster-1x8-pcie.toml", "cluster-16x-10gbe-ps.toml",
                                  "cluster-4x8-a100-100gbe.toml"])
def test_example_clusters_with_example_workload(capsys, tmp_path, name):
    out = tmp_path / "plan.json"
    code, text, err = _run(capsys, "--workload", str(EXAMPLES / "workload.toml"),
                           "--cluster", str(EXAMPLES / name), "--out", str(out), "--quiet")
    assert code == 0, err
    assert text.startswith("recommend")
    assert read_json(out, "plan")["sweep"]


def test_seed_example_names_network_and_fix(capsys, tmp_path, workload):
    code, text, err = _run(capsys, "--workload", str(workload), "--nodes", "2",
                           "--network-gbps", "1", "--ps", "4", "--out", str(tmp_path / "p.json"),
                           "--json")
    assert code == 0, err
    d = json.loads(text)
    row = next(r for r in d["sweep"] if r["gpus"] == 2 and r["architecture"] == "ps")
    assert row["bottleneck"] == "network-worker"
    assert row["comm_s"] == pytest.approx(2.88, rel=0.01)
    assert d["recommendation"]["network_gbps_needed"] == pytest.approx(38.4, rel=1e-6)


def test_cli_overrides_cluster_file(capsys, tmp_path, workload):
    out = tmp_path / "p.json"
    code, _, err = _run(capsys, "--workload", str(workload), "--cluster",
                        str(EXAMPLES / "cluster-16x-10gbe-ps.toml"), "--nodes", "4",
                        "--network", "25GbE", "--out", str(out), "--quiet")
    assert code == 0, err
    d = read_json(out, "plan")
    assert d["inputs"]["cluster"]["nodes"] == 4
    assert d["inputs"]["cluster"]["network"] == "25GbE"
    assert d["inputs"]["cluster"]["ps_network"] == "25GbE"  # from the file


def test_plot_is_a_png(capsys, tmp_path, workload):
    png = tmp_path / "plan.png"
    code, _, err = _run(capsys, "--workload", str(workload), "--nodes", "8",
                        "--network", "10GbE", "--out", str(tmp_path / "p.json"),
                        "--plot", str(png), "--quiet")
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_calibration_file(capsys, tmp_path, workload):
    cal = write_json(tmp_path / "cal.json", "calibration",
                     {"params": {"bandwidth_efficiency": 0.5}})
    out = tmp_path / "p.json"
    code, _, err = _run(capsys, "--workload", str(workload), "--nodes", "2",
                        "--network-gbps", "1", "--ps", "4", "--calibration", str(cal),
                        "--out", str(out), "--quiet")
    assert code == 0, err
    row = next(r for r in read_json(out, "plan")["sweep"] if r["gpus"] == 2)
    assert row["comm_s"] == pytest.approx(5.76, rel=0.01)


BAD = [
    (["--network-gbps", "0"], "network_gbps must be > 0"),
    (["--network-gbps", "-5"], "network_gbps must be > 0"),
    (["--network", "10GbE", "--nodes", "0"], "nodes must be an integer >= 1"),
    (["--network", "10GbE", "--nodes", "-3"], "nodes must be an integer >= 1"),
    (["--network", "10GbE", "--gpus-per-node", "0"], "gpus_per_node must be"),
    (["--network", "10GbE", "--device", "B300"], "unknown device 'B300'"),
    (["--network", "3GbE"], "known: 1GbE, 10GbE"),
    (["--network", "10GbE", "--target-efficiency", "0"], "target efficiency must be in (0, 1]"),
    (["--network", "10GbE", "--target-efficiency", "1.5"], "target efficiency"),
    (["--network", "10GbE", "--overlap", "2"], "overlap must be in [0, 1]"),
    (["--nodes", "2"], "name the network (2 nodes exchange over it)"),
]


@pytest.mark.parametrize("extra,message", BAD)
def test_bad_input_one_line_exit_2(capsys, tmp_path, workload, extra, message):
    code, out, err = _run(capsys, "--workload", str(workload), "--out",
                          str(tmp_path / "p.json"), *extra)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "p.json").exists()


def test_bad_files_one_line_exit_2(capsys, tmp_path):
    plan_file = write_json(tmp_path / "plan.json", "plan", {"sweep": []})
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    no_step = tmp_path / "w.toml"
    no_step.write_text("param_bytes = 1000\nbatch_size = 8\n")
    good = tmp_path / "good.toml"
    good.write_text("param_bytes = 1000\nbatch_size = 8\nstep_s = 0.1\n")
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("step_s = \n")
    future = write_json(tmp_path / "future.json", "profile", {})
    data = json.loads(future.read_text())
    data["schema"] = "scalelab.profile/2"
    future.write_text(json.dumps(data))
    # Latin-1 where UTF-8 is read: a traceback (UnicodeDecodeError) before
    latin_toml = tmp_path / "latin.toml"
    latin_toml.write_bytes("# caf\u00e9\nstep_s = 0.1\n".encode("latin-1"))
    latin_json = tmp_path / "latin.json"
    latin_json.write_bytes(b'{"schema": "scalelab.profile/1", "note": "caf\xe9"}')
    cases = [
        (["--workload", str(latin_toml)], "latin.toml: not UTF-8 text (byte 5: "),
        (["--profile", str(latin_json)], "latin.json: not UTF-8 text (byte 45: "),
        (["--workload", str(good), "--cluster", str(latin_toml)], "not UTF-8 text"),
        (["--workload", str(good), "--calibration", str(latin_json)], "not UTF-8 text"),
        (["--profile", str(plan_file)], "expected a scalelab profile"),
        (["--profile", str(broken)], "not valid JSON"),
        (["--profile", str(future)], "not supported"),
        (["--profile", str(tmp_path / "missing.json")], "no such file"),
        (["--workload", str(no_step)], "missing 'step_s'"),
        (["--workload", str(bad_toml)], "not valid TOML"),
        (["--workload", str(good), "--calibration", str(plan_file)],
         "expected a scalelab calibration"),
    ]
    for argv, message in cases:
        code, _, err = _run(capsys, *argv, "--network", "10GbE",
                            "--out", str(tmp_path / "out.json"))
        assert code == 2, argv
        assert message in err, (argv, err)
        assert len(err.strip().splitlines()) == 1


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--workload", "w.toml", "--ps", "zero"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["plan", "--network", "10GbE"])  # neither --profile nor --workload
    assert e.value.code == 2
