"""The cluster as the user describes it: one NIC per node unless told more; every link
assumption one line in the reasons; a cluster file's bad names are one line."""

import subprocess
import sys

import pytest

from scalelab.errors import UsageError
from scalelab.plan import Cluster, load_cluster, plan, workload_from_dict

A100 = dict(nodes=4, gpus_per_node=8, device="A100-SXM-80GB", network="100GbE")


def test_one_nic_per_node_unless_the_file_or_a_platform_says_more():
    assert Cluster(**A100).nic_sharing()[0] == 8  # eight GPUs share the node's one NIC
    assert "assumed" in Cluster(**A100).nic_sharing()[1]
    assert Cluster(**A100, gpus_per_nic=2).nic_sharing()[0] == 2
    dgx = Cluster(**A100, platform="dgx")
    assert dgx.nic_sharing()[0] == 1 and "DGX A100" in dgx.nic_sharing()[1]
    assert Cluster(**A100, platform="DGX A100").nic_sharing()[0] == 1


@pytest.mark.parametrize("bad, words", [
    (dict(platform="DGX H100"), "not the A100-SXM-80GB's (DGX A100)"),
    (dict(grad_dtype=["bf16"]), "grad_dtype must be a name"),
    (dict(network=100), "network must be a name"),
])
def test_bad_cluster_settings_are_one_line(bad, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Cluster(**{**A100, **bad})


def test_a_list_for_grad_dtype_in_a_cluster_file_is_one_line_exit_2(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('nodes = 2\ngpus_per_node = 2\nnetwork = "10GbE"\ngrad_dtype = ["bf16"]\n')
    with pytest.raises(UsageError, match="grad_dtype must be a name"):
        load_cluster(f)
    w = tmp_path / "w.toml"
    w.write_text('param_bytes = 1000000\nbatch_size = 8\nstep_s = 0.1\n')
    r = subprocess.run([sys.executable, "-m", "scalelab", "plan", "--workload", str(w),
                        "--cluster", str(f)], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "grad_dtype" in r.stderr


def test_each_link_assumption_is_one_line_of_the_reasons():
    w = workload_from_dict({"param_bytes": 100_000_000, "batch_size": 64, "step_s": 0.2})
    rec = plan(w, Cluster(**A100)).recommendation
    links = [r.text for r in rec.reasons if r.topic == "cluster" and r.text.startswith("links")]
    assert any("one NIC for 8 GPUs" in t and "assumed" in t for t in links)
    assert any("inside a node NVLink" in t for t in links)
    rec8 = plan(w, Cluster(**A100, platform="dgx")).recommendation
    assert any("8 NICs" in r.text for r in rec8.reasons if r.topic == "cluster")
