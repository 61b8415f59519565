"""The profiler on a real GPU (skipped without CUDA): every candidate, device identity,
out-of-memory at a batch that cannot fit, and the memory given back after it."""

import pytest
import torch

from scalelab.profiler import ProfileOptions, algorithms, run_profile
from scalelab.profiler.probe import TrialRunner
from scalelab.workload import WorkloadSpec

pytestmark = pytest.mark.gpu

CONV = WorkloadSpec("tests.toy_profiler:small_cnn", input_shape=(3, 16, 16), num_classes=4)
WIDE = WorkloadSpec("tests.toy_profiler_models:wide", input_shape=(8,), num_classes=2)


def _precision_flags():
    if algorithms.precision_api() == "fp32_precision":
        return (torch.backends.cuda.matmul.fp32_precision,
                torch.backends.cudnn.conv.fp32_precision, torch.backends.cudnn.benchmark)
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark)


def test_profile_on_cuda_with_every_candidate():
    before = _precision_flags()
    last = torch.cuda.device_count() - 1
    prof = run_profile(CONV, ProfileOptions(device=f"cuda:{last}", batch_sizes=[2, 4],
                                            steps=1))
    assert prof["device"] == "cuda" and prof["device_index"] == last
    assert prof["environment"]["device_name"] == torch.cuda.get_device_name(last)
    assert prof["timed_steps"] == 3 and all(r["timed_steps"] == 3 for r in prof["batches"])
    assert all(r["peak_memory_bytes"] > 0 and r["step_s"] > 0 for r in prof["batches"])
    cands = {c["name"]: c for c in prof["algorithms"]["candidates"]}
    assert list(cands) == algorithms.candidates("cuda", 3)
    for name, c in cands.items():
        assert c["fits"] and c["step_s"] > 0 and "error" not in c, name
    assert prof["algorithms"]["chosen"] in cands
    assert _precision_flags() == before  # every candidate's flags were put back


def test_auto_search_on_cuda():
    prof = run_profile(CONV, ProfileOptions(device="cuda", max_batch=64, algorithms="none"))
    assert prof["max_batch_size"] == 64 and prof["batches"][0]["batch_size"] == 1
    assert prof["cost"]["trials"] <= 16


def test_out_of_memory_at_a_batch_that_cannot_fit():
    dev = torch.device("cuda", torch.cuda.current_device())
    total = torch.cuda.get_device_properties(dev).total_memory
    too_big = 2 * total // (64 * 2**20) + 1  # twice the device in activations alone
    with TrialRunner(WIDE, dev, budget_bytes=total) as runner:
        baseline = torch.cuda.memory_allocated(dev)
        t = runner.run(too_big, "default", warmup=0, steps=1)
        assert not t.fits and t.trains and t.reason.startswith("out of memory"), t.reason
        # The failed step's tensors went back: only the model (and little else) remains.
        assert torch.cuda.memory_allocated(dev) <= baseline + 2 * 2**30
        ok = runner.run(4, "default", warmup=1, steps=3)
    assert ok.fits and ok.timing.step_s > 0


def test_auto_search_brackets_the_device_memory():
    prof = run_profile(WIDE, ProfileOptions(device="cuda", max_batch=1 << 16,
                                            algorithms="none", steps=3))
    b = prof["max_batch_size"]
    assert b is not None and 1 <= b < 1 << 16 and not prof["max_batch_capped"]
    probes = {p["batch_size"]: p for p in prof["memory_probes"]}
    assert any(not p["fits"] for p in probes.values())
    assert prof["cost"]["trials"] <= 16
