"""Contradictions refused in one line: report inputs it would render without a word, a
ZeRO layout under parameter servers, --precision for a CPU target, a workload's
input_shape as a number, advise's bad cluster file before any folder or profile."""

import json
import subprocess
import sys

import pytest

from scalelab.errors import UsageError
from scalelab.plan import Cluster, PlanOptions, plan, workload_from_dict
from scalelab.report.html import collect_inputs
from scalelab.results import write_json


def _write(tmp_path, name, kind, body):
    return write_json(tmp_path / name, kind, body)


def _plan_file(tmp_path, name, model):
    p = plan(workload_from_dict({"model": model, "input_shape": [3, 32, 32], "num_classes": 10,
                                 "batch_size": 8, "step_s": 0.1}), Cluster(nodes=1))
    return _write(tmp_path, name, "plan", p.to_dict())


@pytest.mark.parametrize("kind, body, words", [
    ("calibration", {"params": {}}, "a calibration file has no page in the report"),
    ("plan", {}, "not a complete plan: 'sweep' must be a list"),
    ("profile", {"workload": {"model": "resnet18"}, "batches": {"batch_size": 2}},
     "'batches' must be a list"),
    ("profile", {"workload": {"model": "resnet18"},
                 "batches": [{"batch_size": 2, "step_s": -0.5}]},
     "step_s must be a positive time in seconds, got -0.5"),
])
def test_report_refuses_files_it_would_render_without_a_word(tmp_path, kind, body, words):
    f = _write(tmp_path, f"{kind}.json", kind, body)
    with pytest.raises(UsageError, match=words) as e:
        collect_inputs([f])
    assert str(f) in str(e.value) and "\n" not in str(e.value)


def test_report_refuses_plans_of_two_models(tmp_path):
    a, b = _plan_file(tmp_path, "a.json", "resnet18"), _plan_file(tmp_path, "b.json", "alexnet")
    with pytest.raises(UsageError, match="different models"):
        collect_inputs([a, b])


def test_a_zero_layout_under_parameter_servers_is_refused():
    w = workload_from_dict({"param_bytes": 10_000_000, "batch_size": 8, "step_s": 0.1})
    c = Cluster(nodes=2, gpus_per_node=2, network="10GbE", architecture="ps")
    with pytest.raises(UsageError, match="parameter servers keep it themselves"):
        plan(w, c, PlanOptions(layout="zero2"))
    with pytest.raises(UsageError, match="drop --layout"):
        plan(w, Cluster(nodes=2, gpus_per_node=2, network="10GbE"),
             PlanOptions(layout="zero1", architectures=("ps",)))


@pytest.mark.parametrize("precision", ["tf32", "fp16"])
def test_another_precision_for_a_cpu_target_is_one_line(precision):
    w = workload_from_dict({"model": "resnet18", "input_shape": [3, 32, 32],
                            "batch_size": 8, "step_s": 0.5, "device": "cpu"})
    with pytest.raises(UsageError, match=f"--precision {precision} on cpu: its peaks"):
        plan(w, Cluster(device="cpu"), PlanOptions(precision=precision))


def test_input_shape_as_a_number_in_a_workload_is_one_line():
    with pytest.raises(UsageError, match="'input_shape' must be a list of sizes, got 5"):
        workload_from_dict({"model": "resnet18", "input_shape": 5, "batch_size": 8,
                            "step_s": 0.1})


def test_advise_refuses_a_bad_cluster_file_before_any_folder_or_profile(tmp_path):
    c = tmp_path / "c.toml"
    c.write_text('nodes = 2\ngpus_per_node = 2\nnetwork = "10GbE"\ngrad_dtype = ["bf16"]\n')
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "scalelab", "advise", "scalelab.toys:tiny",
                        "--input-shape", "12", "--num-classes", "4", "--cluster", str(c),
                        "--out", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "grad_dtype must be a name" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()
    assert not json.dumps(r.stdout).count("progress:")
