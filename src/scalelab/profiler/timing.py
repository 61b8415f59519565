"""The step timer: forward, backward, optimizer step and whole step of a training step.

Measured like a benchmark: warm-up steps are discarded, the device is synchronized around
every phase, and the median and spread of the timed steps are reported. On CUDA the phases
are timed with CUDA events on the current stream of the device the trial runs on (made the
current device for the trial, so ``"cuda:1"`` times GPU 1) and peak memory is
``torch.cuda.max_memory_allocated`` of that device; on CPU with ``time.perf_counter`` and the
process's peak resident memory (``VmHWM``, reset before the timed steps through
``/proc/self/clear_refs``). The same code path serves both. fp16 autocast trains through a
``GradScaler`` (scaled backward, unscaled and checked step, scale update), as fp16 training
does. By default every step trains on one synthetic batch; given ``batches``, each step
first takes its batch from it (from loader processes, say), and that wait, timed on the
host, is ``data_s``, apart from ``step_s``.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from scalelab.profiler import algorithms
from scalelab.profiler.memory import peak_memory_bytes, reset_peak_memory
from scalelab.workload import WorkloadSpec, logits_of

PHASES = ("forward_s", "backward_s", "optimizer_s", "step_s")


@dataclass(frozen=True)
class StepTiming:
    """Medians (seconds) over the timed steps, with the spread (max - min) of each phase."""

    batch_size: int
    algorithm: str
    forward_s: float
    backward_s: float
    optimizer_s: float
    step_s: float
    forward_s_spread: float
    backward_s_spread: float
    optimizer_s_spread: float
    step_s_spread: float
    samples_per_s: float
    peak_memory_bytes: int
    warmup_steps: int
    timed_steps: int
    data_s: float = 0.0  # the wait for the step's batch (0 on the synthetic batch)
    data_s_spread: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


class _Clock:
    """Wall-clock marks on CPU, CUDA events on GPU; ``elapsed`` synchronizes."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.current_stream(device) if self.cuda else None

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(self.stream)
            return ev
        return time.perf_counter()

    def elapsed(self, a, b) -> float:
        if self.cuda:
            b.synchronize()
            return a.elapsed_time(b) / 1e3
        return b - a


def time_steps(
    spec: WorkloadSpec,
    model: torch.nn.Module,
    batch_size: int,
    device: str | torch.device = "cpu",
    algorithm: str = "default",
    warmup: int = 1,
    steps: int = 3,
    seed: int = 0,
    batches: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> StepTiming:
    """Train ``model`` for ``warmup + steps`` steps at ``batch_size`` and time the last ones;
    ``batches``: where each step's (inputs, targets) come from (default: one synthetic
    batch for every step)."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got {steps}, {warmup}")
    dev = torch.device(device)
    on_device = torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()
    with on_device, algorithms.backend_flags(algorithm, dev):
        samples = _train(spec, model, batch_size, dev, algorithm, warmup, steps, seed,
                         batches)
    med = {p: statistics.median(v) for p, v in samples.items()}
    spread = {f"{p}_spread": max(v) - min(v) for p, v in samples.items()}
    return StepTiming(
        batch_size=batch_size, algorithm=algorithm, **med, **spread,
        samples_per_s=batch_size / med["step_s"], peak_memory_bytes=peak_memory_bytes(dev),
        warmup_steps=warmup, timed_steps=steps,
    )


def _train(spec, model, batch_size, dev, algorithm, warmup, steps, seed, batches
           ) -> dict[str, list[float]]:
    model = model.to(dev).train()
    if batches is None:
        x, y = spec.synthetic_batch(batch_size, seed=seed, device=dev)
        model, x = algorithms.prepare(algorithm, model, x)
    optimizer = spec.make_optimizer(model.parameters())
    scaler = algorithms.grad_scaler(algorithm, dev)
    loss_fn = spec.loss_fn()
    clock = _Clock(dev)
    samples: dict[str, list[float]] = {p: [] for p in (*PHASES, "data_s")}
    for i in range(warmup + steps):
        if i == warmup:
            reset_peak_memory(dev)
        wait_s = 0.0
        if batches is not None:
            t_wait = time.perf_counter()
            x, y = batches()
            wait_s = time.perf_counter() - t_wait
            if i == 0:  # the model once; every batch after it
                model, x = algorithms.prepare(algorithm, model, x.to(dev))
            else:
                x = algorithms.prepare_batch(algorithm, x.to(dev))
            y = y.to(dev)
        t0 = clock.mark()
        optimizer.zero_grad(set_to_none=True)
        with algorithms.autocast(algorithm, dev):
            loss = loss_fn(logits_of(model(x)), y)
        t1 = clock.mark()
        (scaler.scale(loss) if scaler is not None else loss).backward()
        t2 = clock.mark()
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        t3 = clock.mark()
        if i >= warmup:
            samples["forward_s"].append(clock.elapsed(t0, t1))
            samples["backward_s"].append(clock.elapsed(t1, t2))
            samples["optimizer_s"].append(clock.elapsed(t2, t3))
            samples["step_s"].append(clock.elapsed(t0, t3))
            samples["data_s"].append(wait_s)
    return samples


def measure_steps(
    spec: WorkloadSpec,
    batch_size: int,
    device: str | torch.device = "cpu",
    algorithm: str = "default",
    warmup: int = 2,
    steps: int = 5,
    seed: int = 0,
) -> StepTiming:
    """Build ``spec``'s model and time its training step in this process.

    The one step timer of scalelab: the profiler, the runner's contention measurement and
    validation all call it.
    """
    model = spec.build_model(seed=seed)
    return time_steps(spec, model, batch_size, device, algorithm, warmup, steps, seed)
