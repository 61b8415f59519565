"""Plan from a real profile: `scalelab profile` on this CPU, then `scalelab plan` on its file."""

import json

import pytest

from scalelab.cli import main
from scalelab.plan import Cluster, load_profile, plan
from scalelab.results import read_json


@pytest.mark.slow
def test_plan_from_a_real_tiny_profile(tmp_path, capsys):
    prof = tmp_path / "profile.json"
    rc = main(["profile", "tests.toy_models:mlp", "--input-shape", "6", "--num-classes", "3",
               "--batch-sizes", "4,8", "--algorithms", "none", "--out", str(prof)])
    assert rc == 0
    inp = load_profile(prof)
    data = read_json(prof, "profile")
    assert inp.param_bytes == data["workload"]["param_bytes"] == (6 * 16 + 16 + 16 * 3 + 3) * 4
    assert inp.step_s > 0 and inp.batch_size in (4, 8)

    # the same device (none named): step_s is used as measured, not an estimate
    p = plan(inp, Cluster(nodes=2, network="1GbE"))
    assert not p.estimate
    assert all(r.compute_s == inp.step_s for r in p.sweep if r.gpus == 1)

    # a GPU cluster: compute is scaled from a CPU profile with a stated assumption
    out = tmp_path / "plan.json"
    capsys.readouterr()
    rc = main(["plan", "--profile", str(prof), "--nodes", "2", "--gpus-per-node", "4",
               "--device", "A100-SXM-80GB", "--network", "100GbE", "--quiet", "--json",
               "--out", str(out)])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    written = read_json(out, "plan")
    assert written["estimate"] is True and printed["estimate"] is True
    assert any("assum" in w for w in written["warnings"])
    assert {r["architecture"] for r in written["sweep"]} == {"ps", "allreduce", "hierarchical"}
    assert max(r["gpus"] for r in written["sweep"]) == 8
    for key in ("batch_size", "algorithm", "gpus", "num_ps", "num_ps_min",
                "network_gbps_needed", "loader_workers", "reasons"):
        assert key in written["recommendation"]
