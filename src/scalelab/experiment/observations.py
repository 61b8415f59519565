"""Measured cases a calibration is fitted to, read from validation.json and run.json files.

Each observation is one measured case and the inputs its prediction needs (the ``inputs``
of a validation case; for a ``run.json`` its own median compute time, its parameter bytes,
the nominal emulated rate and the runner's exchange form, ``RunConfig.exchange_form``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalelab.errors import UsageError, is_number
from scalelab.experiment.case import CaseInputs, full_duplex_of


@dataclass(frozen=True)
class Observation:
    """One measured case: what it was, what its prediction needs, what was measured."""

    config: dict[str, Any]
    """The case's grid keys (workers, ps, architecture, partition, batch_size, rate)."""
    inputs: CaseInputs
    measured_step_s: float
    """Median measured step time, seconds."""
    source: str = ""
    """The file it came from."""

    def __post_init__(self):
        if not self.measured_step_s > 0:
            raise ValueError(f"measured step must be > 0 s, got {self.measured_step_s}")


def observations_from_validation(data: dict, source: str = "") -> list[Observation]:
    out = []
    cases = data.get("cases", [])
    if not isinstance(cases, list):
        raise UsageError(f"{source}: 'cases' must be a list, got {cases!r}")
    for c in cases:
        if not (isinstance(c, dict) and isinstance(c.get("inputs"), dict)
                and c.get("measured_step_s")):
            raise UsageError(f"{source}: a validation case lacks inputs or a measured step")
        step = c["measured_step_s"]
        if not (is_number(step) and step > 0):
            raise UsageError(f"{source}: a case's measured_step_s must be a number > 0 "
                             f"seconds, got {step!r}")
        if not isinstance(c.get("config"), dict):
            raise UsageError(f"{source}: a validation case has no 'config' object")
        inputs = CaseInputs.from_dict(c["inputs"], source or "validation case")
        out.append(Observation(c["config"], inputs, float(step), source))
    return out


def _run_exchange_form(cfg: dict, source: str) -> str:
    from scalelab.runner import RunConfig
    from scalelab.workload import WorkloadSpec

    try:
        return RunConfig(workload=WorkloadSpec.from_dict(cfg["workload"]),
                         workers=cfg["workers"], ps=cfg["ps"], architecture="ps",
                         mode="sync", batch_size=cfg["batch_size"]).exchange_form
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"{source}: the run's config is incomplete ({e})") from None


def observation_from_run(data: dict, source: str = "") -> Observation:
    """A parameter-server run on an emulated network: its compute, bytes and nominal rate."""
    from scalelab import netem
    from scalelab.theory.units import bps_to_Bps

    try:
        cfg = data["config"]
        steps = data["steps"]
        step_s = steps["step_s"]["median"]
        compute_s = steps["compute_s"]["median"]
    except (KeyError, TypeError):
        raise UsageError(f"{source}: not a complete run (needs config and step medians)") from None
    if cfg.get("architecture") != "ps":
        raise UsageError(f"{source}: an all-reduce run times its exchange inside backward, so "
                         "its compute is unknown; calibrate from a validation file instead")
    if cfg.get("mode", "sync") != "sync":
        raise UsageError(f"{source}: only synchronous runs can be calibrated against")
    rate = cfg.get("emulate_network")
    if not rate:
        raise UsageError(f"{source}: ran on loopback, so its link bandwidth is unknown "
                         "(use runs with --emulate-network, or a validation file)")
    tensor_bytes: tuple[int, ...] = ()
    if cfg.get("partition") == "tensor":
        from scalelab.opcount import describe
        from scalelab.workload import WorkloadSpec

        tensor_bytes = tuple(describe(WorkloadSpec.from_dict(cfg["workload"]),
                                      flops=False).tensor_bytes)
    form = cfg.get("exchange_form") or _run_exchange_form(cfg, source)
    config = {"workers": cfg["workers"], "ps": cfg["ps"], "architecture": "ps",
              "partition": cfg.get("partition", "balanced"), "batch_size": cfg["batch_size"],
              "rate": rate}
    inputs = CaseInputs(architecture="ps", workers=cfg["workers"], ps=cfg["ps"],
                        partition=config["partition"], param_bytes=data["param_bytes"],
                        tensor_bytes=tensor_bytes, compute_s=compute_s, contention=1.0,
                        bandwidth_Bps=bps_to_Bps(netem.parse_rate(rate)), latency_s=0.0,
                        full_duplex=full_duplex_of(form))
    return Observation(config, inputs, float(step_s), source)


def load_observations(paths: list[str | Path]) -> list[Observation]:
    """Observations from ``scalelab.validation/1`` and ``scalelab.run/1`` files."""
    from scalelab.results import load_any

    if not paths:
        raise UsageError("calibrate needs at least one run.json or validation.json")
    out: list[Observation] = []
    for p in paths:
        kind, data = load_any(p)
        if kind == "validation":
            out += observations_from_validation(data, str(p))
        elif kind == "run":
            out.append(observation_from_run(data, str(p)))
        else:
            raise UsageError(f"{p}: a {kind} file; calibrate reads run and validation files")
    if not out:
        raise UsageError("the files hold no measured cases")
    return out
