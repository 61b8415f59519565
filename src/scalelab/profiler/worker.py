"""The trial process: times training steps on request, one JSON line in, one out.

Run as ``python -m scalelab.profiler.worker``. A spawned interpreter rather than a fork,
because a process forked after OpenMP has started its threads hangs at its first parallel
operation. ``MALLOC_MMAP_THRESHOLD_`` is fixed by the parent so that freed tensors return
to the system and the next trial's peak resident memory starts from the baseline. Every
trial starts from the model's initial weights, with no gradients; the copy they are restored
from stays resident, so CPU peaks include the parameters' bytes once more than training
needs (``workload.param_bytes``; GPU peaks do not: the copy is in host memory).
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys

import torch


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _trial(req: dict, models: dict) -> dict:
    from scalelab.profiler.probe import InitialWeights
    from scalelab.profiler.timing import time_steps
    from scalelab.workload import WorkloadSpec

    spec = WorkloadSpec.from_dict(req["spec"])
    key = json.dumps(req["spec"], sort_keys=True)
    if key not in models:
        model = spec.build_model(seed=req.get("seed", 0))
        models[key] = (model, InitialWeights(model))
    model, initial = models[key]
    model = initial.restore(model.to(memory_format=torch.contiguous_format))
    _trim()
    t = time_steps(spec, model, req["batch_size"], req.get("device", "cpu"),
                   req.get("algorithm", "default"), req["warmup"], req["steps"],
                   req.get("seed", 0))
    return {"timing": t.to_dict()}


def main() -> int:
    from scalelab.profiler.failures import describe_failure, is_out_of_memory

    models: dict[str, tuple] = {}
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("threads"):
            torch.set_num_threads(int(req["threads"]))
        try:
            reply = _trial(req, models)
        except Exception as e:  # noqa: BLE001 - reported to the parent, which decides
            reply = {"oom" if is_out_of_memory(e) else "error": describe_failure(e)}
        _trim()
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
