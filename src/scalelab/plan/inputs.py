"""What the plan starts from: one device's measurement, from a profile or a workload file.

:class:`PlanInput` is the typed hand-off from the profiler (``profile.json``, or the
``profile`` dict itself through :func:`profile_from_dict`) and from hand-written
``workload.toml`` files (DESIGN.md's contracts) to the planner.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalelab.algorithm_names import parse
from scalelab.errors import UsageError, is_number, number_wanted
from scalelab.results import read_json, read_toml


@dataclass(frozen=True)
class PlanInput:
    """One device's measurement, from a profile or a hand-written workload file."""

    batch_size: int
    """b: per-device minibatch the step was measured at."""
    step_s: float
    """T_C at ``batch_size`` on ``device``, seconds."""
    param_bytes: int
    """S_p: bytes of the gradients (parameters x 4 for fp32)."""
    source: str
    """"profile" or "workload"."""
    model: str | None = None
    """Model name (torchvision or package.module:factory), when known."""
    tensor_bytes: tuple[int, ...] = ()
    """Bytes of each parameter tensor."""
    flops_per_sample: float | None = None
    """Training FLOPs per sample (forward + backward)."""
    device: str | None = None
    """Where step_s was measured, as reported ("cpu", a GPU's name)."""
    algorithm: str | None = None
    """The computation configuration the profile chose."""
    load_s_per_batch: float | None = None
    """Input-pipeline time per minibatch in one process, seconds."""
    load_s_per_sample: float | None = None
    """Decode time of one sample on one core, seconds (load_s_per_batch / its batch)."""
    io_s: float = 0.0
    """Exposed input time per step as given (workload files), seconds."""
    batches: tuple[tuple[int, float], ...] = ()
    """Measured (batch_size, step_s) pairs."""
    fit_step_s: tuple[float, float] | None = None
    """Step-time fit (intercept s, per-sample s)."""
    fit_memory_bytes: tuple[float, float] | None = None
    """Memory fit (intercept bytes, per-sample bytes)."""
    max_batch_size: int | None = None
    """Largest batch that fits the profiled device."""
    path: str | None = None
    """The file it came from."""
    input_shape: tuple[int, ...] = (3, 224, 224)
    """One sample's shape."""
    host_s_per_op: float | None = None
    """The host's time to issue one operation of the step, measured where it ran, seconds."""
    num_classes: int = 1000
    """Classifier outputs."""
    busy: bool = False
    """The profile was measured while the machine was busy (its figures are suspect)."""
    host_loaded: str | None = None
    """How loaded the machine was when ``host_s_per_op`` was measured, where that makes it
    suspect (None: quiet, or not measured)."""
    backward_fraction: float | None = None
    """Backward's share of the measured step (from the profile's split), 0..1."""
    memory_components: dict | None = dataclasses.field(default=None, compare=False)
    """The profile's memory by component (:func:`scalelab.profiler.memory.memory_components`)."""

    def __post_init__(self):
        where = f"{self.path}: " if self.path else ""
        if int(self.batch_size) != self.batch_size or self.batch_size < 1:
            raise UsageError(f"{where}batch_size must be an integer >= 1, got {self.batch_size}")
        if not (isinstance(self.step_s, (int, float)) and self.step_s > 0):
            raise UsageError(f"{where}step_s must be > 0 seconds, got {self.step_s}")
        if not (isinstance(self.param_bytes, (int, float)) and self.param_bytes > 0):
            raise UsageError(f"{where}param_bytes must be > 0, got {self.param_bytes}")
        if not self.io_s >= 0:
            raise UsageError(f"{where}io_s must be >= 0, got {self.io_s}")

    def step_s_at(self, batch_size: int) -> float:
        """Measured step time at ``batch_size``, or the linear fit's between measurements."""
        for b, t in self.batches:
            if b == batch_size:
                return t
        if batch_size == self.batch_size:
            return self.step_s
        if self.max_batch_size and batch_size > self.max_batch_size:
            raise UsageError(f"batch size {batch_size} does not fit in the profiled device's "
                             f"memory (largest that fits: {self.max_batch_size})")
        if self.fit_step_s is None:
            measured = ", ".join(str(b) for b, _ in self.batches) or str(self.batch_size)
            raise UsageError(f"batch size {batch_size} was not measured (measured: {measured})")
        a, per = self.fit_step_s
        t = a + per * batch_size
        if not t > 0:
            raise UsageError(f"the step-time fit gives {t:.3g} s at batch {batch_size}")
        return t

    def load_s_at(self, batch_size: int) -> float | None:
        """One process's input time for a minibatch of ``batch_size``: b x t_sample (None on
        synthetic data)."""
        if self.load_s_per_sample:
            return batch_size * self.load_s_per_sample
        if self.load_s_per_batch:
            return self.load_s_per_batch * batch_size / self.batch_size
        return None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["tensor_count"] = len(self.tensor_bytes)
        d.pop("tensor_bytes")
        d["batches"] = [{"batch_size": b, "step_s": t} for b, t in self.batches]
        return d


def _num(d: dict, key: str, where: str, required: bool = True):
    v = d.get(key)
    if v is None:
        if required:
            raise UsageError(f"{where}: missing {key!r}")
        return None
    if not is_number(v):
        raise UsageError(f"{where}: {key!r} must be {number_wanted(v)}, got {v!r}")
    return v


def load_profile(path: str | Path) -> PlanInput:
    """A ``scalelab.profile/1`` file as planner input (DESIGN.md's profile contract)."""
    return profile_from_dict(read_json(path, "profile"), str(path))


def _busy(data: dict) -> bool:
    env = data.get("environment") or {}
    return bool(data.get("busy") or (isinstance(env, dict) and env.get("busy")))


def profile_from_dict(data: dict[str, Any], where: str = "profile") -> PlanInput:
    """A profile's contents (as the profiler returns or profile.json holds) as plan input.

    A field of the wrong kind is one line naming the file and the field (a profile edited
    by hand, or cut short); what a profile may leave out is taken as absent."""
    try:
        return _profile_from_dict(data, where)
    except UsageError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:
        raise UsageError(f"{where}: a malformed profile ({type(e).__name__}: {e})") from None


def _profile_from_dict(data: dict[str, Any], where: str) -> PlanInput:
    try:
        wl = data["workload"]
        env = data.get("environment") or {}
        batches_raw = data["batches"]
        if not isinstance(wl, dict) or not isinstance(batches_raw, list) or not batches_raw:
            raise TypeError
        batches = tuple(sorted((int(_num(r, "batch_size", where)), float(_num(r, "step_s", where)))
                               for r in batches_raw))
    except (KeyError, TypeError, AttributeError):
        raise UsageError(f"{where}: not a complete profile (needs workload and batches)") from None
    rec = _count(data, "recommended_batch_size", where) or batches[-1][0]
    algo = _table(data, "algorithms", where)
    chosen = algo.get("chosen")
    if chosen is not None:  # a name; older profiles' names are read as they are
        _name(algo, "chosen", where, "algorithms.chosen")
    step_at = dict(batches)
    step_s = step_at.get(rec)
    if chosen and isinstance(algo.get("candidates"), list):
        for c in algo["candidates"]:
            if isinstance(c, dict) and c.get("name") == chosen and c.get("step_s"):
                step_s = _positive(c, "step_s", where)
    if step_s is None:
        raise UsageError(f"{where}: recommended batch {rec} has no measured step")
    fit = _table(data, "fit", where)
    io = _table(data, "io", where)
    device = env.get("device_name") or env.get("device") if isinstance(env, dict) else None
    if isinstance(env, dict) and str(env.get("device", "")).lower() == "cpu":
        device = "cpu"
    if device is not None and not isinstance(device, str):
        raise UsageError(f"{where}: the environment's device must be a name, got {device!r}")
    model = wl.get("model")
    if model is not None:
        _name(wl, "model", where)
    components = data.get("memory_components")
    if components is not None:
        from scalelab.plan.layouts import sizes_from_components

        try:
            if not isinstance(components, dict):
                raise TypeError(f"not an object: {components!r}")
            sizes_from_components(components)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            raise UsageError(f"{where}: 'memory_components' is malformed "
                             f"({type(e).__name__}: {e})") from None
    return PlanInput(
        batch_size=int(rec), step_s=float(step_s),
        param_bytes=int(_num(wl, "param_bytes", where)), source="profile",
        model=model, input_shape=_shape(wl, where), num_classes=_classes(wl, where),
        tensor_bytes=_sizes(wl, "tensor_bytes", where),
        flops_per_sample=_num(wl, "flops_per_sample", where, required=False) or None,
        device=device, algorithm=chosen,
        load_s_per_batch=_at_least_zero(io, "load_s_per_batch", where) or None,
        load_s_per_sample=_at_least_zero(io, "load_s_per_sample", where) or None,
        batches=batches, fit_step_s=_line(fit, "step_s", where),
        fit_memory_bytes=_line(fit, "memory_bytes", where),
        max_batch_size=(_count(data, "max_batch_size", where)
                        if data.get("max_batch_is_memory_limit", True) else None),
        path=where, busy=_busy(data), memory_components=components,
        backward_fraction=_backward_fraction(batches_raw, rec),
        host_s_per_op=_host_s_per_op(data, where), host_loaded=_host_loaded(data),
    )


def _table(d: dict, key: str, where: str) -> dict:
    """``d[key]`` as an object ({} when absent)."""
    v = d.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise UsageError(f"{where}: {key!r} must be an object, got {v!r}")
    return v


def _name(d: dict, key: str, where: str, label: str | None = None) -> str:
    v = d.get(key)
    if not (isinstance(v, str) and v.strip()):
        raise UsageError(f"{where}: {label or key!r} must be a name in quotes, got {v!r}")
    return v


def _count(d: dict, key: str, where: str) -> int | None:
    """An integer >= 1, or None when absent."""
    v = _num(d, key, where, required=False)
    if v is not None and (int(v) != v or v < 1):
        raise UsageError(f"{where}: {key!r} must be an integer >= 1, got {v!r}")
    return None if v is None else int(v)


def _classes(d: dict, where: str) -> int:
    n = _count(d, "num_classes", where)
    return 1000 if n is None else n


def _at_least_zero(d: dict, key: str, where: str) -> float | None:
    v = _num(d, key, where, required=False)
    if v is not None and v < 0:
        raise UsageError(f"{where}: {key!r} must be >= 0 seconds, got {v!r}")
    return v


def _shape(d: dict, where: str) -> tuple[int, ...]:
    from scalelab.workload import parse_input_shape

    v = d.get("input_shape")
    if v is None:
        return (3, 224, 224)
    if isinstance(v, bool) or not isinstance(v, (list, tuple, str)):
        raise UsageError(f"{where}: 'input_shape' must be a list of sizes, got {v!r}")
    try:
        return parse_input_shape(v)
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None


def _sizes(d: dict, key: str, where: str) -> tuple[int, ...]:
    v = d.get(key) or ()
    if not isinstance(v, (list, tuple)) or any(
            isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in v):
        raise UsageError(f"{where}: {key!r} must be a list of byte counts, got {v!r}")
    return tuple(v)


def _line(fit: dict, key: str, where: str) -> tuple[float, float] | None:
    """A fit's (intercept, per_sample), or None when it has none."""
    f = fit.get(key)
    if not isinstance(f, dict) or f.get("per_sample") is None:
        return None
    label = f"fit.{key}"
    return (float(_num(f, "intercept", f"{where}: {label}", required=False) or 0.0),
            float(_num(f, "per_sample", f"{where}: {label}")))


def _host_s_per_op(data: dict, where: str) -> float | None:
    """A profile's measured host time per operation (``host.s_per_op``), if it has one."""
    v = _num(_table(data, "host", where), "s_per_op", where, required=False)
    if v is not None and not v > 0:
        raise UsageError(f"{where}: 'host.s_per_op' must be > 0 seconds, got {v!r}")
    return None if v is None else float(v)


def _host_loaded(data: dict) -> str | None:
    """How loaded the machine was when the profile measured its host time per operation
    (:mod:`scalelab.profiler.host` stores it), where it was; a profile from before that
    record counts as loaded when it was marked busy."""
    host, env = data.get("host"), data.get("environment")
    if isinstance(host, dict) and "loaded" in host:
        if not host.get("loaded"):
            return None
        share, load = host.get("others_share"), host.get("load_average")
        cpus = host.get("cpus")
        parts = []
        if isinstance(share, (int, float)):
            parts.append(f"other processes kept {share:.0%} of its "
                         f"{cpus or '?'} cores busy")
        if isinstance(load, (int, float)):
            parts.append(f"load average {load:.1f}")
        return ", ".join(parts) or "marked loaded"
    if _busy(data):
        load = env.get("loadavg_after") if isinstance(env, dict) else None
        return ("the profile was marked busy" + (f", load average {load:.1f}"
                                                 if isinstance(load, (int, float)) else ""))
    return None


def _backward_fraction(rows: list, batch: int) -> float | None:
    for r in rows:
        if isinstance(r, dict) and r.get("batch_size") == batch:
            b, t = r.get("backward_s"), r.get("step_s")
            if isinstance(b, (int, float)) and isinstance(t, (int, float)) and t > 0:
                return min(1.0, max(0.0, b / t))
    return None


def load_workload(path: str | Path) -> PlanInput:
    """A hand-written ``workload.toml`` (DESIGN.md): step_s at batch_size, model or bytes."""
    return workload_from_dict(read_toml(path), str(path))


def workload_from_dict(data: dict[str, Any], where: str = "workload") -> PlanInput:
    known = {"model", "param_bytes", "batch_size", "step_s", "device", "io_s",
             "flops_per_sample", "input_shape", "num_classes", "algorithm",
             "load_s_per_sample", "host_s_per_op"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(known))})")
    step_s = _num(data, "step_s", where)
    batch = _num(data, "batch_size", where)
    model = data.get("model")
    tensor_bytes: tuple[int, ...] = ()
    flops = _positive(data, "flops_per_sample", where, "FLOPs")
    param_bytes = _num(data, "param_bytes", where, required=False)
    input_shape = _shape(data, where)  # a number (input_shape = 5) is one line
    num_classes = _classes(data, where)
    for key in ("device", "algorithm"):
        if key in data:
            _name(data, key, where)
    if "algorithm" in data:
        try:
            parse(data["algorithm"])
        except UsageError as e:
            raise UsageError(f"{where}: 'algorithm': {e}") from None
    load_s_per_sample = _at_least_zero(data, "load_s_per_sample", where)
    if model is not None:
        from scalelab.opcache import describe
        from scalelab.workload import WorkloadSpec

        spec = WorkloadSpec(model=str(model), input_shape=input_shape,
                            num_classes=int(num_classes))
        info = describe(spec, flops=False)
        tensor_bytes = tuple(info.tensor_bytes)
        input_shape = spec.input_shape
        if param_bytes is None:
            param_bytes = info.param_bytes
    if param_bytes is None:
        raise UsageError(f"{where}: give model = NAME or param_bytes = N")
    return PlanInput(
        batch_size=batch, step_s=float(step_s), param_bytes=int(param_bytes), source="workload",
        model=model, tensor_bytes=tensor_bytes, flops_per_sample=flops,
        device=data.get("device"), algorithm=data.get("algorithm"),
        io_s=float(_num(data, "io_s", where, required=False) or 0.0),
        load_s_per_sample=load_s_per_sample,
        batches=((int(batch), float(step_s)),), path=where,
        input_shape=tuple(input_shape), num_classes=int(num_classes),
        host_s_per_op=_positive(data, "host_s_per_op", where),
    )


def _positive(d: dict, key: str, where: str, unit: str = "seconds") -> float | None:
    v = _num(d, key, where, required=False)
    if v is not None and not v > 0:
        raise UsageError(f"{where}: {key!r} must be > 0 {unit}, got {v!r}")
    return v


def load_input(path: str | Path) -> PlanInput:
    """A profile (``.json``) or a workload file (anything else, TOML)."""
    return load_profile(path) if str(path).endswith(".json") else load_workload(path)
