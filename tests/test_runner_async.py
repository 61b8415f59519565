"""The asynchronous parameter server converges on a problem whose solution is known.

Labels are drawn uniformly and independently of the inputs (``synthetic_batch``), so for a
linear model without bias and two classes the expected cross-entropy is minimized where
both rows of W are equal (equal logits for every input), and there it equals log(2). The
gradients of the two rows are opposite, so their sum never changes: the solution is
w1 = w2 = (w1 + w2 at the start) / 2. The model starts with weights five times their usual
scale.
"""

import math

import pytest
import torch

from scalelab.runner import RunConfig, run_training
from scalelab.workload import WorkloadSpec, logits_of

pytestmark = pytest.mark.dist


def test_async_ps_converges_to_the_known_optimum(tmp_path):
    spec = WorkloadSpec("tests.toy_runner:linear_big", input_shape=(8,), num_classes=2,
                        lr=0.5, momentum=0.0)
    cfg = RunConfig(spec, workers=2, ps=2, mode="async", batch_size=64, steps=40, threads=1,
                    final_params_path=str(tmp_path / "final.pt"))
    out = run_training(cfg)
    w0 = torch.cat([p.detach().reshape(-1) for p in spec.build_model(0).parameters()])
    w = torch.load(tmp_path / "final.pt", weights_only=True)
    w0, w = w0.view(2, 8), w.view(2, 8)
    assert (w[0] - w[1]).norm() < 0.1 * (w0[0] - w0[1]).norm()
    assert torch.allclose(w.sum(0), w0.sum(0), atol=1e-5)
    x, y = spec.synthetic_batch(4096, seed=12345)
    model = spec.build_model(0)
    with torch.no_grad():
        model.weight.copy_(w)
        loss = float(spec.loss_fn()(logits_of(model(x)), y))
    assert loss == pytest.approx(math.log(2), abs=0.02)
    st = out["staleness"]
    assert st["max"] >= 0 and len(out["per_rank"]) == 4
    assert [r["steps_run"] for r in out["per_rank"] if r["role"] == "server"] == [80, 80]
