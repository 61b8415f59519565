"""The CUDA paths of the profiler, tested on CPU with fakes: device identity, the forms of
out-of-memory, memory released after the except block, initial weights per trial, TF32 on
both of torch's APIs, the GradScaler for fp16."""

import gc
import sys
import types
import warnings
import weakref

import pytest
import torch

from scalelab.errors import UsageError
from scalelab.profiler import algorithms, probe
from scalelab.profiler.device import device_index, is_cuda, parse_device, resolve_device
from scalelab.profiler.failures import is_out_of_memory
from scalelab.profiler.profile import ProfileOptions
from scalelab.profiler.timing import StepTiming, measure_steps
from scalelab.workload import WorkloadSpec

MLP = WorkloadSpec("tests.toy_models:mlp", input_shape=(6,), num_classes=3)
CONV = WorkloadSpec("tests.toy_profiler:small_cnn", input_shape=(3, 16, 16), num_classes=4)

OOM = [
    torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; "
                                "139.81 GiB total capacity)"),
    RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"),
    RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously "
                 "reported"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_ENOUGH_WORKSPACE"),
    RuntimeError("HIP out of memory. Tried to allocate 1.00 GiB"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
                 "allocate memory: you tried to allocate 8589934592 bytes."),
    MemoryError(),
]
NOT_OOM = [
    ValueError("Expected more than 1 value per channel when training, got input size "
               "torch.Size([1, 8])"),
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x10 and 6x16)"),
    RuntimeError("CUDA error: an illegal memory access was encountered"),
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"),
    TypeError("forward() missing 1 required positional argument"),
]


@pytest.mark.parametrize("exc", OOM, ids=lambda e: type(e).__name__ + ":" + str(e)[:30])
def test_out_of_memory_in_every_form(exc):
    assert is_out_of_memory(exc)


@pytest.mark.parametrize("exc", NOT_OOM, ids=lambda e: str(e)[:30])
def test_other_failures_are_not_out_of_memory(exc):
    assert not is_out_of_memory(exc)


# --- device identity ---------------------------------------------------------------------

def test_device_index_from_the_name_then_local_rank_then_current():
    def current():
        return 0

    assert device_index(torch.device("cuda:1"), {"LOCAL_RANK": "0"}, 2, current) == 1
    assert device_index(torch.device("cuda"), {"LOCAL_RANK": "1"}, 2, current) == 1
    assert device_index(torch.device("cuda"), {}, 2, lambda: 1) == 1
    with pytest.raises(UsageError, match="has 2 CUDA device"):
        device_index(torch.device("cuda:2"), {}, 2, current)
    with pytest.raises(UsageError, match="LOCAL_RANK=3"):
        device_index(torch.device("cuda"), {"LOCAL_RANK": "3"}, 2, current)
    with pytest.raises(UsageError, match="not an integer"):
        device_index(torch.device("cuda"), {"LOCAL_RANK": "x"}, 2, current)


def test_device_type_never_from_string_equality():
    assert is_cuda("cuda:1") and is_cuda(torch.device("cuda", 0)) and not is_cuda("cpu")
    for bad in ("gpu", "cuda:x", "mps"):
        with pytest.raises(UsageError):
            parse_device(bad)


@pytest.fixture
def two_fake_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


def test_resolve_device_on_a_two_gpu_machine(two_fake_gpus, monkeypatch):
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device("cpu") == torch.device("cpu")


def _fake_timing(batch_size, algorithm="default"):
    return StepTiming(batch_size, algorithm, 0.1, 0.2, 0.05, 0.35, 0.0, 0.0, 0.0, 0.01,
                      batch_size / 0.35, 1000, 1, 5)


def test_cuda_1_times_on_cuda_1(two_fake_gpus, monkeypatch):
    """ProfileOptions resolves cuda:1, and the trial runs on that device, in this process."""
    seen = []
    monkeypatch.setattr(probe, "time_steps", lambda spec, model, b, device, *a:
                        seen.append(device) or _fake_timing(b))
    monkeypatch.setattr(probe, "release_cuda_memory", lambda device: None)
    opts = ProfileOptions(device="cuda:1", steps=1)
    assert opts.torch_device == torch.device("cuda", 1) and opts.device_type == "cuda"
    assert opts.timed_steps == 3 and opts.max_batch == 4096  # at least 3 timed on CUDA
    with probe.TrialRunner(MLP, opts.torch_device, budget_bytes=10**9) as runner:
        t = runner.run(4, "cudnn_benchmark", warmup=0, steps=3)
    assert t.fits and seen == [torch.device("cuda", 1)] and runner.proc is None
    assert runner.steps_run == [(4, "cudnn_benchmark", 2 + 3)]  # warm-up for the benchmark


# --- failures inside a trial -------------------------------------------------------------

@pytest.mark.parametrize("exc", OOM[:6] + NOT_OOM[:2], ids=lambda e: str(e)[:30])
def test_in_process_trial_classifies_and_frees_after_the_except_block(exc, monkeypatch):
    held = []

    def failing_step(spec, model, b, device, *a):
        activations = torch.ones(1000)
        held.append(weakref.ref(activations))
        raise type(exc)(*exc.args)  # a fresh exception, as torch raises one per failure

    def release(device):
        gc.collect()
        # Out of the except block: no exception in flight, the failed step's tensors gone.
        assert sys.exc_info() == (None, None, None)
        assert held[0]() is None
        released.append(device)

    released = []
    monkeypatch.setattr(probe, "time_steps", failing_step)
    monkeypatch.setattr(probe, "release_cuda_memory", release)
    runner = probe.TrialRunner(MLP, "cpu", budget_bytes=10**9)
    t = runner._in_process(8, "default", 1, 3)
    assert not t.fits and t.timing is None and released == [torch.device("cpu")]
    if is_out_of_memory(exc):
        assert t.trains and t.reason.startswith("out of memory")
    else:
        assert not t.trains and t.reason.startswith("does not train at batch 8")


def test_every_trial_starts_from_the_initial_weights(monkeypatch):
    received = []

    def poisoning_step(spec, model, b, device, *a):
        received.append((torch.nn.utils.parameters_to_vector(model.parameters()).clone(),
                         [p.grad for p in model.parameters()]))
        for p in model.parameters():
            p.grad = torch.ones_like(p)
            p.data.fill_(float("nan"))  # as an fp16 overflow would leave it
        return _fake_timing(b)

    monkeypatch.setattr(probe, "time_steps", poisoning_step)
    monkeypatch.setattr(probe, "release_cuda_memory", lambda device: None)
    runner = probe.TrialRunner(MLP, "cpu", budget_bytes=10**9, seed=3)
    runner._in_process(2, "fp16_autocast", 1, 3)
    runner._in_process(4, "default", 1, 3)
    initial = torch.nn.utils.parameters_to_vector(MLP.build_model(seed=3).parameters())
    for vec, grads in received:
        assert torch.equal(vec, initial) and all(g is None for g in grads)


def test_the_cpu_trial_process_restores_the_initial_weights_too(monkeypatch):
    from scalelab.profiler import timing, worker

    received = []

    def poisoning_step(spec, model, b, device, *a):
        received.append(torch.nn.utils.parameters_to_vector(model.parameters()).clone())
        for p in model.parameters():
            p.data.fill_(float("nan"))
        return _fake_timing(b)

    monkeypatch.setattr(timing, "time_steps", poisoning_step)
    models = {}
    req = {"spec": MLP.to_dict(), "batch_size": 4, "warmup": 0, "steps": 1, "seed": 5}
    assert worker._trial(req, models)["timing"]["batch_size"] == 4
    worker._trial(dict(req, batch_size=8), models)
    assert len(models) == 1  # one model served both trials
    initial = torch.nn.utils.parameters_to_vector(MLP.build_model(seed=5).parameters())
    assert all(torch.equal(v, initial) for v in received) and len(received) == 2


# --- TF32 on both APIs, GradScaler -------------------------------------------------------

class _Refuses:
    """A flag holder whose legacy attribute must not be touched (it raises on use)."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __getattr__(self, name):
        raise AssertionError(f"legacy flag {name} touched")


def _new_api(monkeypatch, matmul="none", conv="tf32"):
    cuda = types.SimpleNamespace(matmul=_Refuses(fp32_precision=matmul))
    cudnn = _Refuses(benchmark=False, conv=types.SimpleNamespace(fp32_precision=conv))
    monkeypatch.setattr(torch.backends, "cuda", cuda)
    monkeypatch.setattr(torch.backends, "cudnn", cudnn)
    return cuda, cudnn


def _legacy_api(monkeypatch, matmul=False, conv=True):
    cuda = types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=matmul))
    cudnn = types.SimpleNamespace(benchmark=False, allow_tf32=conv)
    monkeypatch.setattr(torch.backends, "cuda", cuda)
    monkeypatch.setattr(torch.backends, "cudnn", cudnn)
    return cuda, cudnn


NEW = {"default": ("ieee", "tf32", False), "tf32": ("tf32", "tf32", False),
       "fp32_strict": ("ieee", "ieee", False), "cudnn_benchmark+tf32": ("tf32", "tf32", True)}
LEGACY = {"default": (False, True, False), "tf32": (True, True, False),
          "fp32_strict": (False, False, False), "cudnn_benchmark+tf32": (True, True, True)}


@pytest.mark.parametrize("name", list(NEW))
def test_tf32_through_fp32_precision(name, monkeypatch):
    cuda, cudnn = _new_api(monkeypatch)
    assert algorithms.precision_api() == "fp32_precision"
    with algorithms.backend_flags(name, "cuda:1"):
        assert (cuda.matmul.fp32_precision, cudnn.conv.fp32_precision,
                cudnn.benchmark) == NEW[name]
    assert (cuda.matmul.fp32_precision, cudnn.conv.fp32_precision, cudnn.benchmark) == \
        ("none", "tf32", False)


@pytest.mark.parametrize("name", list(LEGACY))
def test_tf32_through_the_legacy_flags(name, monkeypatch):
    cuda, cudnn = _legacy_api(monkeypatch, matmul=True, conv=False)  # a user's own setting
    assert algorithms.precision_api() == "allow_tf32"
    with algorithms.backend_flags(name, "cuda"):
        assert (cuda.matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark) == LEGACY[name]
    assert (cuda.matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark) == (True, False, False)


def test_flags_restored_when_the_trial_fails(monkeypatch):
    cuda, cudnn = _new_api(monkeypatch, matmul="tf32", conv="ieee")
    with pytest.raises(RuntimeError), algorithms.backend_flags("fp32_strict", "cuda"):
        raise RuntimeError("CUDA error: out of memory")
    assert (cuda.matmul.fp32_precision, cudnn.conv.fp32_precision) == ("tf32", "ieee")


def test_cpu_trials_leave_the_cuda_flags_alone(monkeypatch):
    cuda, cudnn = _legacy_api(monkeypatch)
    with algorithms.backend_flags("tf32+cudnn_benchmark", "cpu"):
        assert (cuda.matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark) == \
            (False, True, False)


def test_this_torch_has_the_new_api_and_no_legacy_warning():
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        pytest.skip("torch before 2.9")
    before = (torch.backends.cuda.matmul.fp32_precision,
              torch.backends.cudnn.conv.fp32_precision)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with algorithms.backend_flags("tf32", "cuda"):
            assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        with algorithms.backend_flags("fp32_strict", "cuda"):
            assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    assert (torch.backends.cuda.matmul.fp32_precision,
            torch.backends.cudnn.conv.fp32_precision) == before


def test_fp32_strict_is_a_cuda_candidate_and_default_is_pytorchs():
    names = algorithms.candidates("cuda:0", 3)
    assert names[0] == "default" and "fp32_strict" in names and "tf32" in names
    assert algorithms.tf32_setting(algorithms.parse("default")) == (False, True)
    with pytest.raises(UsageError):
        algorithms.parse("tf32+fp32_strict")


@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled")
def test_fp16_trains_through_a_grad_scaler(monkeypatch):
    assert isinstance(algorithms.grad_scaler("fp16_autocast", "cuda:0"), torch.amp.GradScaler)
    assert algorithms.grad_scaler("bf16_autocast", "cuda") is None
    calls = []
    real = torch.amp.GradScaler.step

    def counting_step(self, optimizer, *a, **k):
        calls.append(type(optimizer).__name__)
        return real(self, optimizer, *a, **k)

    monkeypatch.setattr(torch.amp.GradScaler, "step", counting_step)
    t = measure_steps(MLP, 2, "cpu", "fp16_autocast", warmup=1, steps=2)
    assert calls == ["SGD"] * 3 and t.timed_steps == 2
    measure_steps(MLP, 2, "cpu", "bf16_autocast", warmup=0, steps=1)
    assert len(calls) == 3  # bf16 has the range of fp32: no scaler


def test_warmup_for_the_cudnn_benchmark():
    assert algorithms.warmup_steps("cudnn_benchmark", "cuda:1", 0) == 2
    assert algorithms.warmup_steps("default", "cuda", 0) == 1
    assert algorithms.warmup_steps("cudnn_benchmark", "cpu", 0) == 0
