"""The comparison's configurations: the baseline, and the paper's recommendations applied
to it one at a time (:func:`ablation`), for :mod:`scalelab.experiment.compare`.

A configuration (:class:`StepConfig`) is what a baseline file may set, and the layout of
the model state the plan recommends: parameter servers (``architecture="ps"``) or, when
the plan's ``recommendation.layout`` shards it, sharded data parallelism
(``architecture="fsdp"`` at ``zero`` 1, 2 or 3, ``scalelab run --architecture fsdp --zero
N``), applied last (the ``layout`` step) with no servers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalelab.errors import UsageError
from scalelab.results import read_toml

BASELINE: dict[str, Any] = {
    "batch_size": 16,
    "ps": 1,
    "partition": "tensor",
    "algorithm": "default",
    "loader_workers": 0,
}
ORDER = ("batch+algorithm", "loaders", "servers", "balanced shards", "layout")
RUN_ALGORITHMS = ("default",)  # the computation configurations scalelab run trains with


@dataclass(frozen=True)
class StepConfig:
    """One configuration of the ablation (the keys a baseline file may set)."""

    batch_size: int = 16
    ps: int = 1
    partition: str = "tensor"
    algorithm: str = "default"
    loader_workers: int = 0
    architecture: str = "ps"
    """ps, or fsdp when the plan shards the model state (``zero`` the ZeRO level)."""
    zero: int | None = None

    def __post_init__(self):
        for name, low in (("batch_size", 1), ("ps", 1), ("loader_workers", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise UsageError(f"{name} must be an integer >= {low}, got {v!r}")
        if self.partition not in ("balanced", "tensor"):
            raise UsageError(f"partition must be 'balanced' or 'tensor', got {self.partition!r}")
        if self.algorithm not in RUN_ALGORITHMS:
            raise UsageError(f"algorithm {self.algorithm!r}: scalelab run trains only in the "
                             f"default computation configuration ({', '.join(RUN_ALGORITHMS)})")
        if (self.architecture, self.zero) not in (("ps", None), ("fsdp", 1), ("fsdp", 2),
                                                  ("fsdp", 3)):
            raise UsageError(f"a configuration is ps (no ZeRO level) or fsdp at zero 1, 2 or 3, "
                             f"got {self.architecture} zero={self.zero}")

    @property
    def sharded(self) -> bool:
        return self.architecture == "fsdp"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def baseline_config(overrides: dict[str, Any] | None = None, where: str = "baseline"
                    ) -> StepConfig:
    """:data:`BASELINE` with ``overrides``; unknown keys are a usage error."""
    overrides = overrides or {}
    unknown = sorted(set(overrides) - set(BASELINE))
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(BASELINE))})")
    try:
        return StepConfig(**{**BASELINE, **overrides})
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None


def load_baseline(path: str | Path) -> StepConfig:
    """A baseline TOML file (any keys of :data:`BASELINE`) as a :class:`StepConfig`."""
    return baseline_config(read_toml(path), str(path))


@dataclass(frozen=True)
class Change:
    name: str
    config: StepConfig
    applied: dict[str, Any]


def ablation(baseline: StepConfig, recommended: StepConfig, one_at_a_time: bool = True
             ) -> tuple[list[Change], list[dict[str, str]]]:
    """Configurations from ``baseline`` to ``recommended`` in the paper's order.

    Returns the steps (the first ``baseline``, the last ``recommended``) and the
    recommendations skipped because the configuration already had them. Without
    ``one_at_a_time``: just the two ends. A sharded ``recommended`` (fsdp) has no servers:
    its ``ps`` and ``partition`` must be the baseline's, the servers and shards steps are
    skipped, and the ``layout`` step shards last.
    """
    groups = {
        "batch+algorithm": ("batch_size", "algorithm"),
        "loaders": ("loader_workers",),
        "servers": ("ps",),
        "balanced shards": ("partition",),
        "layout": ("architecture", "zero"),
    }
    no_servers = ("servers", "balanced shards") if recommended.sharded else ()
    steps = [Change("baseline", baseline, {})]
    skipped: list[dict[str, str]] = []
    current = baseline
    if one_at_a_time:
        for name in ORDER:
            if name == "layout" and not (recommended.sharded or current.sharded):
                continue  # parameter servers throughout: no layout to change
            if name in no_servers:
                skipped.append({"name": name, "reason": f"the recommended layout (ZeRO-"
                                f"{recommended.zero}, scalelab run --architecture fsdp) has "
                                "no parameter servers"})
                continue
            change = {k: getattr(recommended, k) for k in groups[name]
                      if getattr(recommended, k) != getattr(current, k)}
            if not change:
                skipped.append({"name": name, "reason": "the configuration already has it: "
                                + ", ".join(f"{k} {getattr(current, k)}" for k in groups[name])})
                continue
            current = dataclasses.replace(current, **change)
            steps.append(Change(name, current, change))
    else:
        change = {k: v for k, v in recommended.to_dict().items() if baseline.to_dict()[k] != v}
        steps.append(Change("recommended", recommended, change))
    if len(steps) == 1:
        steps.append(Change("recommended", recommended, {}))
    last = steps[-1]
    if last.name != "recommended":
        steps[-1] = Change("recommended", last.config, {**last.applied, "step": last.name})
    assert steps[-1].config == recommended
    return steps, skipped
