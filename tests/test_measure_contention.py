"""What a case's prediction starts from: the contention of plain processes, for all-reduce
workers a floor measured with DDP processes on loopback, and for parameter-server workers
a floor under their compute measured with them meeting before each step."""

from __future__ import annotations

import statistics

import pytest

from scalelab.experiment.case import CaseInputs, predict_case
from scalelab.experiment.measure import Measurements, case_inputs
from scalelab.workload import WorkloadSpec

SPEC = WorkloadSpec("tests.toy_validate:conv_heavy", input_shape=(3, 32, 32), num_classes=10)
SLOW = {"bandwidth_Bps": 37.5e6, "latency_s": 200e-6}


class Known(Measurements):
    """Measurements with known timings; what was timed is recorded."""

    def __init__(self, crowd_step_s: list[float], ddp_step_s: list[float],
                 in_step_s: list[float] = ()):
        super().__init__(SPEC)
        self.crowd_step_s, self.ddp_step_s, self.asked = crowd_step_s, ddp_step_s, []
        self.in_step_s = list(in_step_s)

    def lone_timing(self, batch_size, threads):
        return {"forward_s": 0.02, "backward_s": 0.04, "step_s": 0.065}

    def contended_timings(self, batch_size, workers):
        self.asked.append("plain")
        return [{"forward_s": s / 3, "backward_s": s * 2 / 3 - 0.005, "step_s": s}
                for s in self.crowd_step_s]

    def loopback_timings(self, batch_size, workers, ddp=True):
        if not ddp:  # forward + backward + the wait for the slowest, as measured
            self.asked.append("in step")
            return [{"forward_s": s / 3, "backward_s": s / 3, "data_s": s / 3,
                     "step_s": s * 2 / 3 + 0.005} for s in self.in_step_s]
        self.asked.append("ddp")
        return [{"forward_s": 0.02, "backward_s": s - 0.03, "step_s": s}
                for s in self.ddp_step_s]

    def link(self, rate):
        return SLOW


class Info:
    param_bytes = 1e6
    tensor_bytes = (1_000_000,)


def _case(arch, workers=2):
    return {"architecture": arch, "workers": workers, "ps": 1 if arch == "ps" else None,
            "partition": "balanced", "batch_size": 16, "rate": "300mbit"}


def test_a_parameter_server_case_floors_its_compute_by_its_workers_in_step():
    meas = Known([0.07, 0.08, 0.09], [0.5], in_step_s=[0.10, 0.12, 0.11])
    inputs = case_inputs(_case("ps"), "push-then-pull", meas, Info())
    assert sorted(meas.asked) == ["in step", "plain"] and inputs.floor_step_s == 0.0
    # forward + backward of the crowd's median over the lone forward + backward
    assert inputs.contention == pytest.approx((0.08 - 0.005) / 0.06)
    # the slowest worker's compute (forward + backward + the wait) is above the crowd's
    assert inputs.compute_floor_s == pytest.approx(0.11)
    assert inputs.worker_compute_s == pytest.approx(0.11)
    floored, free = predict_case(inputs), predict_case({**inputs.to_dict(),
                                                        "compute_floor_s": 0.0})
    assert floored.step_s == pytest.approx(free.step_s + 0.11 - 0.075)
    # a floor below the crowd's compute changes nothing
    low = predict_case({**inputs.to_dict(), "compute_floor_s": 0.05})
    assert low == free
    assert CaseInputs.from_dict(inputs.to_dict()) == inputs
    with pytest.raises(ValueError, match="compute_floor_s"):
        CaseInputs(**{**inputs.to_dict(), "tensor_bytes": (), "compute_floor_s": -1.0})


def test_an_allreduce_case_is_floored_by_its_ddp_step_on_loopback():
    ddp = [0.30, 0.36, 0.33]
    meas = Known([0.07, 0.08, 0.09], ddp)
    inputs = case_inputs(_case("allreduce"), "push-then-pull", meas, Info())
    assert sorted(meas.asked) == ["ddp", "plain"]
    assert inputs.contention == pytest.approx(0.08 / 0.065)
    assert inputs.floor_step_s == pytest.approx(statistics.median(ddp))
    unfloored = predict_case({**inputs.to_dict(), "floor_step_s": 0.0})
    assert unfloored.step_s < 0.33  # 1 MB at 300 Mbit/s beside 80 ms of compute
    pred = predict_case(inputs)
    assert pred.step_s == pytest.approx(0.33) and pred.bottleneck == "compute"
    # a floor under the model's step changes nothing
    low = predict_case({**inputs.to_dict(), "floor_step_s": unfloored.step_s / 2})
    assert low == unfloored
    # written and read back with the case
    assert CaseInputs.from_dict(inputs.to_dict()) == inputs


def test_one_allreduce_worker_is_not_timed_on_loopback():
    meas = Known([0.07], [0.5])
    inputs = case_inputs(_case("allreduce", workers=1), "push-then-pull", meas, Info())
    assert "ddp" not in meas.asked and inputs.floor_step_s == 0.0


def test_a_case_on_loopback_has_no_floor_from_loopback():
    # the floor would be the very run the case predicts
    for arch in ("allreduce", "ps"):
        meas = Known([0.07, 0.08], [0.5], [0.2])
        inputs = case_inputs({**_case(arch), "rate": None}, "push-then-pull", meas, Info())
        assert meas.asked == ["plain"]
        assert inputs.floor_step_s == inputs.compute_floor_s == 0.0


def test_the_ddp_floor_keeps_the_least_disturbed_of_its_repeats(monkeypatch):
    from scalelab.experiment import measure

    # the first repeat met a burst of other load; the second did not
    repeats = iter([[0.40, 0.45], [0.30, 0.33], [9.0, 9.0]])
    calls = []

    def fake(spec, batch_size, workers, threads, steps, seed=0, timeout_s=300.0, ddp=True,
             algorithm="default"):
        calls.append((batch_size, workers, ddp))
        return [{"step_s": s} for s in next(repeats)]

    monkeypatch.setattr(measure, "time_ddp_concurrently", fake)
    meas = Measurements(SPEC)
    got = meas.loopback_timings(16, 2)
    assert [t["step_s"] for t in got] == [0.30, 0.33]
    assert calls == [(16, 2, True)] * measure.FLOOR_REPEATS
    assert meas.loopback_timings(16, 2) is got and len(calls) == measure.FLOOR_REPEATS
    inputs = case_inputs(_case("allreduce"), "push-then-pull", _LoopbackOnly(meas), Info())
    assert inputs.floor_step_s == pytest.approx(0.315)


class _LoopbackOnly(Known):
    """Known timings, but the DDP floor from ``meas`` (already timed)."""

    def __init__(self, meas):
        super().__init__([0.07], [])
        self.meas = meas

    def loopback_timings(self, batch_size, workers, ddp=True):
        return self.meas.loopback_timings(batch_size, workers, ddp)


@pytest.mark.dist
def test_ddp_timing_runs_every_rank_on_loopback():
    import torch

    from scalelab.experiment.measure import time_ddp_concurrently

    torch.set_num_threads(1)
    got = time_ddp_concurrently(SPEC, 8, 2, 1, steps=3)
    assert len(got) == 2
    for t in got:
        assert t["timed_steps"] == 3 and min(t["forward_s"], t["backward_s"]) > 0
        assert t["step_s"] >= max(t["forward_s"], t["backward_s"])


@pytest.mark.dist
def test_workers_in_step_wait_for_one_another_before_each_step():
    import torch

    from scalelab.experiment.measure import fed_step_of, time_ddp_concurrently

    torch.set_num_threads(1)
    got = time_ddp_concurrently(SPEC, 8, 2, 1, steps=4, ddp=False)
    assert len(got) == 2 and all(t["timed_steps"] == 4 for t in got)
    # every step starts with a barrier over loopback: a wait of hundreds of microseconds at
    # the least (handing back a ready batch alone takes about one)
    assert min(t["data_s"] for t in got) > 50e-6
    # met before every step, both go round at the pace of the slower one
    cycles = [t["forward_s"] + t["backward_s"] + t["data_s"] for t in got]
    assert max(cycles) < 1.5 * min(cycles)
    assert fed_step_of(got, "ps") >= min(t["forward_s"] + t["backward_s"] for t in got)
