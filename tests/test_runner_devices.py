"""Rank -> device assignment, tested with made-up device counts (no GPU needed)."""

import pytest
import torch

from scalelab.cli import main
from scalelab.errors import UsageError
from scalelab.runner import RunConfig
from scalelab.runner.devices import RankDevice, assign, check_local, for_rank
from scalelab.workload import WorkloadSpec

SPEC = WorkloadSpec("tests.toy_runner:wide", input_shape=(6,), num_classes=3)


def cfg(**kw) -> RunConfig:
    return RunConfig(workload=SPEC, **kw)


def test_cpu_puts_every_rank_on_the_cpu_over_gloo():
    c = cfg(workers=2, ps=1, device="cpu")
    assert [for_rank(c, r, r, 8) for r in range(3)] == [RankDevice("cpu", "gloo")] * 3


def test_local_launcher_allreduce_gives_worker_k_gpu_k_over_nccl():
    c = cfg(workers=4, architecture="allreduce", device="cuda")
    assert [for_rank(c, r, r, 4).device for r in range(4)] == [f"cuda:{k}" for k in range(4)]
    assert {for_rank(c, r, r, 4).backend for r in range(4)} == {"nccl"}


def test_two_nccl_ranks_never_share_a_gpu():
    c = cfg(workers=3, architecture="allreduce", device="cuda")
    with pytest.raises(UsageError, match="rank 2 is worker 3 of its host, which has 2 GPU"):
        check_local(c, 2)
    for_rank(c, 1, 1, 2)  # the ranks that fit are placed


def test_torchrun_takes_the_gpu_from_local_rank():
    c = cfg(workers=8, architecture="allreduce", device="cuda")
    # node 1 of 2 with --nproc-per-node 4: global ranks 4..7, LOCAL_RANK 0..3
    assert [for_rank(c, 4 + lr, lr, 4).cuda_index for lr in range(4)] == [0, 1, 2, 3]
    with pytest.raises(UsageError, match="two NCCL ranks never share a GPU"):
        for_rank(c, 6, 2, 2)


def test_parameter_server_workers_wrap_around_and_servers_stay_on_the_cpu():
    c = cfg(workers=3, ps=2, device="cuda")
    placed = [for_rank(c, r, r, 2) for r in range(5)]
    assert [p.device for p in placed] == ["cuda:0", "cuda:1", "cuda:0", "cpu", "cpu"]
    assert {p.backend for p in placed} == {"gloo"}


def test_colocated_servers_do_not_take_a_gpu_position():
    # torchrun, 2 nodes x 4 processes, ranks alternate worker, server, worker, server
    c = cfg(workers=4, ps=4, colocate=True, device="cuda")
    node1 = [for_rank(c, 4 + lr, lr, 2) for lr in range(4)]
    assert [p.device for p in node1] == ["cuda:0", "cpu", "cuda:1", "cpu"]


def test_no_gpu_or_a_local_rank_that_does_not_fit_is_refused():
    c = cfg(workers=1, ps=1, device="cuda")
    with pytest.raises(UsageError, match="sees no CUDA device"):
        for_rank(c, 0, 0, 0)
    with pytest.raises(UsageError, match="LOCAL_RANK 3 does not fit RANK 1"):
        assign("cuda", "ps", "worker", 1, 3, lambda r: True, 2)


def test_device_defaults_to_cuda_when_torch_sees_a_gpu(monkeypatch):
    assert cfg(workers=1).device == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    c = cfg(workers=1)
    assert (c.device, c.stage_host) == ("cuda", True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert (cfg(workers=1).device, cfg(workers=1).stage_host) == ("cpu", False)
    assert RunConfig.from_dict(c.to_dict()) == c


def test_bad_device_values_are_usage_errors():
    with pytest.raises(UsageError, match="unknown device 'gpu'"):
        cfg(workers=1, device="gpu")
    with pytest.raises(UsageError, match="stage_host cannot be False"):
        cfg(workers=1, ps=1, device="cuda", stage_host=False)
    with pytest.raises(ValueError, match="disagree"):
        RankDevice("cuda:0", "nccl")


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this host has GPUs enough")
def test_cli_refuses_more_nccl_ranks_than_gpus_in_one_line(capsys):
    code = main(["run", "tests.toy_runner:wide", "--input-shape", "6", "--num-classes", "3",
                 "--workers", "2", "--architecture", "allreduce", "--device", "cuda",
                 "--quiet", "--out", ""])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and ("no CUDA device" in err[0] or "never share a GPU" in err[0])


def test_cli_rejects_an_unknown_device():
    with pytest.raises(SystemExit) as e:
        main(["run", "tests.toy_runner:wide", "--workers", "1", "--device", "tpu"])
    assert e.value.code == 2


def test_a_gpu_rank_times_with_events_and_reads_each_step_one_step_later(monkeypatch):
    """No synchronization to time a step: an event at every phase boundary on the stream,
    and step s read (its last event waited for) only once step s+1 has been queued."""
    from scalelab.runner import entry
    from scalelab.runner.timers import maybe_phase

    calls = []
    clock = [0.0]
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("sync"))

    class FakeEvent:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t = None

        def record(self, stream=None):
            clock[0] += 1.0
            self.t = clock[0]
            calls.append("mark")

        def synchronize(self):
            calls.append("wait")

        def elapsed_time(self, end):  # milliseconds, as CUDA's
            return (end.t - self.t) * 1e3

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)

    def body(step, timer):
        with maybe_phase(timer, "compute_s"):
            calls.append(f"compute{step}")
        with maybe_phase(timer, "push_s"):
            calls.append(f"push{step}")
        return {"loss": torch.tensor(float(step))}

    log = entry.RankLog(None, {})
    c = cfg(workers=1, ps=1, steps=2)
    entry._steps(c, 0, body, log, RankDevice("cuda:0", "gloo", 0))
    assert "sync" not in calls
    # step 0: start, compute in/out, push in/out, stop; step 1 starts where step 0 stopped
    assert calls[:6] == ["mark", "mark", "compute0", "mark", "mark", "push0"]
    assert calls.index("wait") > calls.index("push1")  # step 0 read after step 1 queued
    assert [r["step"] for r in log.records] == [0, 1]
    r0, r1 = log.records
    assert r0["compute_s"] == pytest.approx(1.0) and r0["push_s"] == pytest.approx(1.0)
    assert r0["step_s"] == pytest.approx(5.0)  # 6 marks: start .. stop
    assert r1["step_s"] == pytest.approx(5.0)  # from step 0's stop to its own
    assert r1["loss"] == 1.0 and isinstance(r1["loss"], float)
    calls.clear()
    entry._steps(cfg(workers=1, ps=1, steps=1), 0, body, log, RankDevice("cpu", "gloo"))
    assert calls == ["compute0", "push0"]
    assert {"compute_s", "push_s", "step_s"} <= set(log.records[-1])
