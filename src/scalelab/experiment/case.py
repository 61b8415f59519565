"""One case of an experiment: what its prediction needs, and the prediction itself.

:class:`CaseInputs` holds the measured numbers a case is predicted from (a worker's compute
as timed on this machine, the contention between the case's workers, the measured link)
and the case's shape (architecture, workers, servers, shards, the runner's exchange form).
It is written into validation.json as the case's ``inputs`` (:meth:`CaseInputs.to_dict`)
and read back by the calibration (:meth:`CaseInputs.from_dict`).

:func:`predict_case` evaluates the step model (:func:`scalelab.plan.step.predict_step`) for
one case: the worker's measured compute under contention reaches the model as its compute
time ``T_C = compute_s x contention``, never below the compute its workers took when
timed meeting before each step (``compute_floor_s``); a calibration's ``ModelParams``
apply on top.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

from scalelab.errors import UsageError
from scalelab.plan.step import ModelParams, StepPrediction, StepSetup, StepWorkload, predict_step
from scalelab.theory import comm

CASE_ARCHITECTURES = ("ps", "allreduce", "fsdp")


def full_duplex_of(exchange_form: str) -> bool:
    """Whether an exchange form (``RunConfig.exchange_form``) is the pipelined one."""
    return exchange_form == comm.PIPELINED


@dataclass(frozen=True)
class CaseInputs:
    """Everything :func:`predict_case` needs for one case, as measured numbers."""

    architecture: str
    """ps | allreduce | fsdp (sharded: ``zero`` says the ZeRO level)."""
    workers: int
    """W: data-parallel workers."""
    ps: int
    """Parameter servers (0 for all-reduce)."""
    partition: str
    """Shards: 'balanced' even chunks or 'tensor' whole tensors."""
    param_bytes: float
    """S_p: gradient bytes a worker exchanges per step."""
    tensor_bytes: tuple[int, ...]
    """Bytes of each parameter tensor (only for whole-tensor placement)."""
    compute_s: float
    """One worker's compute timed alone with the threads it gets in the case, seconds."""
    contention: float
    """Median compute of the case's workers timed at once over ``compute_s``."""
    bandwidth_Bps: float
    """Measured per-direction bandwidth of every host's link, bytes/s."""
    latency_s: float
    """Measured per-message latency of the link, seconds."""
    full_duplex: bool
    """The runner's exchange is pipelined (``RunConfig.exchange_form``)."""
    floor_step_s: float = 0.0
    """A step measured with the case's workers on the fastest link (all-reduce: DDP on
    loopback), seconds; the predicted step is never below it. 0: none measured."""
    compute_floor_s: float = 0.0
    """The case's workers' compute timed with them meeting before each step (the slowest
    one's), seconds; T_C is never below it. 0: none measured."""
    colocated: bool = False
    """Servers on the workers' hosts (server k on host k mod W), sharing their links."""
    zero: int = 0
    """ZeRO level of a sharded case (1, 2, 3; 0 for the others)."""
    sharded_compute_s: float = 0.0
    """A sharded case: its step without the exchange, its workers at once (ZeRO-2/3: FSDP2
    on a process group of one), seconds. 0: not measured."""
    link_exchange_s: float = 0.0
    """A sharded case: its step's collectives
    (:func:`scalelab.theory.sharded_step.step_collectives`) replayed in sequence on its
    link (emulated or loopback), seconds."""
    allreduce_buckets_s: tuple[float, ...] = ()
    """ZeRO-1: each of DDP's bucket all-reduces in that replay, in order, seconds."""
    backward_s: float = 0.0
    """ZeRO-1: the backward of its workers computing at once, seconds."""

    def __post_init__(self):
        if self.architecture not in CASE_ARCHITECTURES:
            raise ValueError(f"case architecture must be one of {CASE_ARCHITECTURES}, "
                             f"got {self.architecture!r}")
        if int(self.workers) != self.workers or self.workers < 1:
            raise ValueError(f"case workers must be an integer >= 1, got {self.workers}")
        if (self.architecture == "fsdp") != (self.zero in (1, 2, 3)):
            raise ValueError(f"a sharded (fsdp) case needs zero 1, 2 or 3 and no other case "
                             f"has one, got {self.architecture} zero={self.zero}")
        if self.architecture == "ps" and not self.ps >= 1:
            raise ValueError(f"a parameter-server case needs ps >= 1, got {self.ps}")
        for name in ("param_bytes", "compute_s", "contention", "bandwidth_Bps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"case {name} must be > 0, got {getattr(self, name)}")
        if not self.latency_s >= 0:
            raise ValueError(f"case latency_s must be >= 0, got {self.latency_s}")
        for name in ("floor_step_s", "compute_floor_s", "sharded_compute_s",
                     "link_exchange_s", "backward_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"case {name} must be >= 0, got {getattr(self, name)}")
        object.__setattr__(self, "tensor_bytes", tuple(int(b) for b in self.tensor_bytes))
        object.__setattr__(self, "allreduce_buckets_s",
                           tuple(float(t) for t in self.allreduce_buckets_s))

    @property
    def worker_compute_s(self) -> float:
        """T_C of a worker in this case: its lone compute times the measured contention,
        never below the compute measured in step (``compute_floor_s``)."""
        return max(self.compute_s * self.contention, self.compute_floor_s)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["tensor_bytes"] = list(self.tensor_bytes)
        d["allreduce_buckets_s"] = list(self.allreduce_buckets_s)
        if not self.colocated:
            del d["colocated"]  # dedicated servers: the file form older cases have
        if not self.zero:
            del d["zero"]
        for k in ("sharded_compute_s", "link_exchange_s", "allreduce_buckets_s", "backward_s"):
            if not d[k]:
                del d[k]  # measured for sharded cases only
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "case") -> CaseInputs:
        """A case's ``inputs`` as written in validation.json (bad values: UsageError)."""
        try:
            return cls(architecture=d["architecture"], workers=int(d["workers"]),
                       ps=int(d.get("ps") or 0), partition=d.get("partition") or "balanced",
                       param_bytes=float(d["param_bytes"]),
                       tensor_bytes=tuple(d.get("tensor_bytes") or ()),
                       compute_s=float(d["compute_s"]), contention=float(d["contention"]),
                       bandwidth_Bps=float(d["bandwidth_Bps"]),
                       latency_s=float(d["latency_s"]), full_duplex=bool(d["full_duplex"]),
                       floor_step_s=float(d.get("floor_step_s") or 0.0),
                       compute_floor_s=float(d.get("compute_floor_s") or 0.0),
                       colocated=bool(d.get("colocated", False)), zero=int(d.get("zero") or 0),
                       allreduce_buckets_s=tuple(d.get("allreduce_buckets_s") or ()),
                       **{k: float(d.get(k) or 0.0) for k in (
                           "sharded_compute_s", "link_exchange_s", "backward_s")})
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"{where}: case inputs are incomplete or invalid ({e})") from None


def _as_params(params) -> ModelParams:
    if params is None:
        return ModelParams()
    if isinstance(params, ModelParams):
        return params
    return ModelParams.from_dict(params.to_dict())


def predict_case(inputs: CaseInputs | dict[str, Any], params: ModelParams | None = None,
                 io_s: float = 0.0) -> StepPrediction:
    """The step model for one case; ``params`` a calibration's ``ModelParams`` (neutral);
    ``io_s`` the input time per step not hidden by loader processes (0: synthetic data).

    The calibrated per-message latency adds to the measured link's; every host's link
    (workers and dedicated servers alike) has the measured bandwidth. A step the model puts
    below the case's measured ``floor_step_s`` is raised to it, its bottleneck the compute
    (the host's cores: the floor was measured with the fastest link).

    A sharded case (fsdp, ZeRO level z) with its measurements
    (:func:`scalelab.experiment.measure.case_inputs`) is its step without the exchange plus
    its collectives one after another on its link, less what of ZeRO-1's bucketed
    all-reduce hides behind backward (:func:`scalelab.theory.sharded_step.cpu_step_s`).
    Without them (a file from before them): DDP's step with ZeRO-z's exposed exchange
    (:func:`scalelab.theory.zero.layout_exposed_s`).
    """
    if not isinstance(inputs, CaseInputs):
        inputs = CaseInputs.from_dict(inputs)
    if inputs.architecture == "fsdp":
        return _predict_sharded(inputs, params, io_s)
    params = _as_params(params)
    workload = StepWorkload(param_bytes=inputs.param_bytes, compute_s=inputs.worker_compute_s,
                            io_s=io_s, tensor_bytes=inputs.tensor_bytes)
    setup = StepSetup(architecture=inputs.architecture, workers=inputs.workers,
                      num_ps=inputs.ps or 1, partition=inputs.partition,
                      full_duplex=inputs.full_duplex, colocated=inputs.colocated,
                      worker_bandwidth_Bps=inputs.bandwidth_Bps,
                      ps_bandwidth_Bps=inputs.bandwidth_Bps,
                      latency_s=inputs.latency_s + params.latency_s)
    pred = predict_step(workload, setup, params)
    if inputs.floor_step_s > pred.step_s:
        return dataclasses.replace(pred, step_s=inputs.floor_step_s, bottleneck="compute")
    return pred


def _predict_sharded(inputs: CaseInputs, params, io_s: float) -> StepPrediction:
    from scalelab.theory import sharded_step, zero

    form = f"ZeRO-{inputs.zero} on Gloo/CPU: its collectives one by one, nothing overlapped"
    if inputs.sharded_compute_s > 0:
        rest = inputs.sharded_compute_s
        step = sharded_step.cpu_step_s(rest, inputs.link_exchange_s,
                                       inputs.allreduce_buckets_s, inputs.backward_s)
        return StepPrediction(
            compute_s=rest, push_s=0.0, apply_s=0.0, pull_s=0.0,
            comm_s=inputs.link_exchange_s, io_s=io_s, step_s=step + io_s, form=form,
            bottleneck="communication" if inputs.link_exchange_s > rest else "compute")
    ddp = predict_case(dataclasses.replace(inputs, architecture="allreduce", zero=0,
                                           link_exchange_s=0.0), params, io_s)
    layout = f"zero{inputs.zero}"
    exposed = max(ddp.step_s - ddp.compute_s - ddp.io_s, 0.0)
    shown = zero.layout_exposed_s(layout, exposed, ddp.comm_s, ranks=inputs.workers)
    # the layout's whole exchange: what it would leave with none of DDP's hidden
    comm = zero.layout_exposed_s(layout, ddp.comm_s, ddp.comm_s, ranks=inputs.workers)
    step = max(ddp.compute_s + ddp.io_s + shown, inputs.floor_step_s)
    return dataclasses.replace(ddp, step_s=step, comm_s=comm,
                               form=f"{ddp.form}, ZeRO-{inputs.zero} as FSDP runs it")


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured."""
    if not measured > 0:
        raise ValueError(f"measured value must be > 0, got {measured}")
    return (predicted - measured) / measured


@dataclass(frozen=True)
class ErrorSummary:
    """Median and largest |relative error| over some cases."""

    median_abs_error: float | None
    """Median |error|, a fraction (None without cases)."""
    max_abs_error: float | None
    """Largest |error|, a fraction (None without cases)."""
    cases: int
    """Cases counted."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def error_summary(cases: list[dict], field: str = "error") -> dict[str, float | int | None]:
    """``{median_abs_error, max_abs_error, cases}`` of ``case[field]`` over ``cases``."""
    return summarize_errors([c[field] for c in cases if c.get(field) is not None]).to_dict()


def summarize_errors(errors: list[float]) -> ErrorSummary:
    errs = [abs(e) for e in errors]
    if not errs:
        return ErrorSummary(None, None, 0)
    return ErrorSummary(statistics.median(errs), max(errs), len(errs))
