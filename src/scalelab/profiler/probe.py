"""One trial of a batch size: time it and see whether its peak memory fits the budget.

On CPU trials run in a separate trial process (:mod:`scalelab.profiler.worker`) watched by
this one: a trial process whose resident memory passes the budget is killed, and one that
dies (the kernel's out-of-memory killer, an allocation failure) means "does not fit". The
tool itself never runs out of memory. The trial process is started once and reused; after
a kill the next trial starts a new one.

On CUDA trials run in this process, on the device the profile names (``cuda:1`` is GPU 1).
An allocation failure in any of its forms (:mod:`scalelab.profiler.failures`) means "does
not fit"; the memory is given back after the ``except`` block has been left, once the
exception (whose traceback holds the failed step's tensors) is gone.

Either way every trial starts from the same initial weights (a copy of the model's state
taken when it was built) with no gradients, so a diverging candidate (an fp16 overflow) or
the steps of earlier trials cannot change the next one. Any other exception means the
model does not train at that batch (BatchNorm at batch 1): such a trial has ``trains``
False, and the search goes on.
"""

from __future__ import annotations

import gc
import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass

import torch

from scalelab.profiler import algorithms as algos
from scalelab.profiler.failures import describe_failure, is_out_of_memory
from scalelab.profiler.memory import resident_bytes
from scalelab.profiler.timing import StepTiming, time_steps
from scalelab.workload import WorkloadSpec


@dataclass(frozen=True)
class Trial:
    batch_size: int
    algorithm: str
    fits: bool
    timing: StepTiming | None
    peak_memory_bytes: int | None
    reason: str = ""
    trains: bool = True  # False: the model raised something other than out-of-memory


def _verdict(timing: StepTiming, budget_bytes: int) -> Trial:
    fits = timing.peak_memory_bytes <= budget_bytes
    return Trial(timing.batch_size, timing.algorithm, fits, timing, timing.peak_memory_bytes,
                 "" if fits else "peak memory above the budget")


def untrainable(batch_size: int, algorithm: str, failure: str) -> Trial:
    return Trial(batch_size, algorithm, False, None, None,
                 f"does not train at batch {batch_size}: {failure}", trains=False)


class InitialWeights:
    """The model's state when built, put back (and gradients dropped) before every trial."""

    def __init__(self, model: torch.nn.Module):
        self.state = {k: v.detach().to("cpu", copy=True) for k, v in
                      model.state_dict().items()}

    def restore(self, model: torch.nn.Module) -> torch.nn.Module:
        model.load_state_dict(self.state)
        for p in model.parameters():
            p.grad = None
        return model


class TrialRunner:
    """Runs trials for one workload on one device; ``close()`` ends the trial process."""

    def __init__(self, spec: WorkloadSpec, device: str | torch.device, budget_bytes: int,
                 seed: int = 0, timeout_s: float = 900.0):
        self.spec, self.budget_bytes = spec, budget_bytes
        self.device = torch.device(device)
        self.seed, self.timeout_s = seed, timeout_s
        self.proc: subprocess.Popen | None = None
        self.steps_run: list[tuple[int, str, int]] = []  # (batch, algorithm, steps)
        self._model: torch.nn.Module | None = None
        self._initial: InitialWeights | None = None

    def __enter__(self) -> TrialRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.stdin.close()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None

    def run(self, batch_size: int, algorithm: str = "default", warmup: int = 1,
            steps: int = 3, memory_only: bool = False) -> Trial:
        """One trial; ``memory_only`` probes run as asked (no warm-up added for timing)."""
        if not memory_only:
            warmup = algos.warmup_steps(algorithm, self.device, warmup)
        self.steps_run.append((batch_size, algorithm, warmup + steps))
        if self.device.type == "cuda":
            return self._in_process(batch_size, algorithm, warmup, steps)
        return self._in_worker(batch_size, algorithm, warmup, steps)

    def _in_process(self, batch_size, algorithm, warmup, steps) -> Trial:
        if self._model is None:
            self._model = self.spec.build_model(seed=self.seed)
            self._initial = InitialWeights(self._model)
        model = self._initial.restore(self._model.to(memory_format=torch.contiguous_format))
        failure, oom = None, False
        try:
            timing = time_steps(self.spec, model, batch_size, self.device, algorithm, warmup,
                                steps, self.seed)
        except Exception as e:  # noqa: BLE001 - classified below, outside this block
            failure, oom = describe_failure(e), is_out_of_memory(e)
            e.__traceback__ = None  # whoever still holds the exception holds no frames
        # The exception and its traceback (which holds the failed step's tensors) are gone
        # here: now the memory can go back to the device.
        model.zero_grad(set_to_none=True)
        release_cuda_memory(self.device)
        if failure is None:
            return _verdict(timing, self.budget_bytes)
        if oom:
            return Trial(batch_size, algorithm, False, None, None, f"out of memory: {failure}")
        return untrainable(batch_size, algorithm, failure)

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
        return subprocess.Popen(
            [sys.executable, "-m", "scalelab.profiler.worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, bufsize=1,
        )

    def _in_worker(self, batch_size, algorithm, warmup, steps) -> Trial:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        req = {"spec": self.spec.to_dict(), "batch_size": batch_size, "algorithm": algorithm,
               "warmup": warmup, "steps": steps, "seed": self.seed, "device": "cpu",
               "threads": torch.get_num_threads()}
        proc.stdin.write(json.dumps(req) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + self.timeout_s
        line = ""
        while not line:
            ready, _, _ = select.select([proc.stdout], [], [], 0.02)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    break
                continue
            rss = resident_bytes(proc.pid)
            if rss is not None and rss > self.budget_bytes:
                self._kill()
                return Trial(batch_size, algorithm, False, None, rss,
                             "resident memory passed the budget")
            if time.monotonic() > deadline:
                self._kill()  # too slow to profile here: a batch that did not train
                return Trial(batch_size, algorithm, False, None, rss,
                             f"took longer than the probe's {self.timeout_s:.0f} s")
        if not line:
            return self._died(batch_size, algorithm)
        msg = json.loads(line)
        if "oom" in msg:
            return Trial(batch_size, algorithm, False, None, None, f"out of memory: {msg['oom']}")
        if "error" in msg:
            return untrainable(batch_size, algorithm, msg["error"])
        return _verdict(StepTiming(**msg["timing"]), self.budget_bytes)

    def _died(self, batch_size: int, algorithm: str) -> Trial:
        proc = self.proc
        code = proc.wait()
        err = proc.stderr.read().strip().splitlines()[-1:] if proc.stderr else []
        self.proc = None
        if code < 0:
            return Trial(batch_size, algorithm, False, None, None,
                         f"the trial process died (signal {-code})")
        raise RuntimeError(f"the trial process exited with {code}: {' '.join(err)}")

    def _kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def release_cuda_memory(device: torch.device) -> None:
    """Collect unreachable tensors, then hand the cached blocks back to the device."""
    gc.collect()
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.empty_cache()
