"""An emulated cluster with its parameter server on one of the worker hosts, beside the same
server on a host of its own: each predicted, run on shaped links, and compared.

The server's host carries the other workers' pushes and its own worker's traffic on one
link, so one colocated server on 3 hosts moves 2 S_p through its link a phase where a
dedicated server moves 3 S_p. On this machine (2 cores shared, alexnet_like, batch 8,
400 Mbit/s, 3 steps): colocated 612 ms predicted, 571 measured (+7.2%); dedicated 900 and
844 (+6.6%). With the profile timed once for both cases (``--reuse-profiles``, 36 s against
51 s for the test): colocated 609 and 582 (+4.7%), dedicated 901 and 858 (+5.0%). At 200
Mbit/s and 4 steps: colocated 1,243 and 1,230 (+1.1%), dedicated 1,851 and 1,720 (+7.6%);
with 2 servers on the 3 hosts 657 and 705 (-6.8%).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from scalelab.results import read_json
from tests.test_netem import left_by

MODEL = ["tests.toy_validate:alexnet_like", "--input-shape", "3,32,32", "--num-classes", "10"]


@pytest.mark.netem
def test_a_server_on_one_of_the_hosts_is_predicted_like_the_grid(tmp_path):
    out = tmp_path / "validation.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "scalelab", "validate", *MODEL, "--grid",
         "workers=3 ps=1 ps_placement=colocated,dedicated rate=400mbit batch_size=8",
         "--steps", "3", "--warmup-steps", "1", "--profile-steps", "2", "--reuse-profiles",
         "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    v = read_json(out, "validation")
    cases = {c["config"]["ps_placement"]: c for c in v["cases"]}
    co, dedicated = cases["colocated"], cases["dedicated"]
    assert co["inputs"]["colocated"] is True and "colocated" not in dedicated["inputs"]
    # --reuse-profiles: both cases share one lone profile (same batch, same threads)
    assert len(v["profile"]) == 1
    # the colocated server is predicted as well as the grid's other case, and it is faster
    assert abs(co["error"]) <= max(0.15, abs(dedicated["error"]))
    assert co["measured_step_s"] < dedicated["measured_step_s"]
    assert co["predicted_step_s"] < dedicated["predicted_step_s"]
    assert left_by(proc.pid) == []
