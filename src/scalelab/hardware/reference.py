"""Published single-GPU training throughputs (``reference.toml``), each with its source.

A point says: this model, on this catalog device, at this precision and per-GPU batch,
trained at this many samples/s, measured by this source. The cross-device model is fitted
to these points (:mod:`scalelab.hardware.fit`). Points kept for testing live apart, in the
test suite's data; :func:`load_points` reads either file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

PRECISION_MODES = ("fp32", "tf32", "fp16", "bf16")


@dataclass(frozen=True)
class RefPoint:
    model: str
    device: str
    precision: str
    batch: int
    samples_per_s: float
    source: str
    framework: str = "pytorch"
    group: str = ""
    input_shape: tuple[int, ...] = (3, 224, 224)
    memory_format: str = "nchw"  # "nhwc": the model and batches in channels_last

    def __post_init__(self):
        object.__setattr__(self, "input_shape", tuple(int(x) for x in self.input_shape))
        if self.memory_format not in ("nchw", "nhwc"):
            raise ValueError(f"{self.device} {self.model}: memory_format must be nchw or "
                             f"nhwc, got {self.memory_format!r}")
        if self.precision not in PRECISION_MODES:
            raise ValueError(f"{self.device}: precision {self.precision!r} is not one of "
                             f"{', '.join(PRECISION_MODES)}")
        if int(self.batch) != self.batch or self.batch < 2:
            raise ValueError(f"{self.device}: batch must be an integer >= 2, got {self.batch}")
        if not self.samples_per_s > 0:
            raise ValueError(f"{self.device}: samples_per_s must be > 0, "
                             f"got {self.samples_per_s}")
        if not self.source:
            raise ValueError(f"{self.device} {self.model}: every point needs its source")

    @property
    def step_s(self) -> float:
        return self.batch / self.samples_per_s

    @property
    def key(self) -> tuple:
        return (self.model, self.input_shape, self.device, self.precision, self.batch,
                self.samples_per_s, self.group, self.memory_format)

    def ops(self):
        """The operations of one training step of this point's workload, in its memory
        format."""
        from dataclasses import replace

        from scalelab.opcache import step_ops
        from scalelab.workload import WorkloadSpec

        ops = step_ops(WorkloadSpec(self.model, input_shape=self.input_shape), self.batch)
        return replace(ops, channels_last=self.memory_format == "nhwc")


@dataclass(frozen=True)
class Reference:
    points: tuple[RefPoint, ...]
    launch_s: float  # one kernel launch: the step floor is kernels x launch_s
    launch_source: str
    host_s_per_op: float = 0.0  # the host's time to issue one operation (when none is given)
    host_source: str = ""


def _parse(data: dict, where: str) -> tuple[RefPoint, ...]:
    from scalelab import hardware

    points = []
    for i, d in enumerate(data.get("point", [])):
        try:
            p = RefPoint(**d)
        except TypeError as e:
            raise ValueError(f"{where}: point {i + 1}: {e}") from None
        hardware.device(p.device)  # an unknown device is an error in the data
        points.append(p)
    return tuple(points)


def load_points(path: str | Path) -> tuple[RefPoint, ...]:
    """The ``[[point]]`` entries of a TOML file (the reference table or a held-out one)."""
    with open(path, "rb") as f:
        return _parse(tomllib.load(f), str(path))


@lru_cache(maxsize=1)
def reference() -> Reference:
    """The packaged reference table, parsed once."""
    text = resources.files("scalelab.hardware").joinpath("reference.toml").read_text()
    data = tomllib.loads(text)
    floor, host = data["floor"], data.get("host", {})
    return Reference(_parse(data, "reference.toml"), float(floor["launch_s"]), floor["source"],
                     float(host.get("s_per_op", 0.0)), str(host.get("source", "")))
