"""The trial process: times training steps on request, one JSON line in, one out.

Run as ``python -m scalelab.profiler.worker``. A spawned interpreter rather than a fork,
because a process forked after OpenMP has started its threads hangs at its first parallel
operation. ``MALLOC_MMAP_THRESHOLD_`` is fixed by the parent so that freed tensors return
to the system and the next trial's peak resident memory starts from the baseline.
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


def main() -> int:
    from scalelab.profiler.timing import time_steps
    from scalelab.workload import WorkloadSpec

    models: dict[str, torch.nn.Module] = {}
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("threads"):
            torch.set_num_threads(int(req["threads"]))
        try:
            spec = WorkloadSpec.from_dict(req["spec"])
            key = json.dumps(req["spec"], sort_keys=True)
            if key not in models:
                models[key] = spec.build_model(seed=req.get("seed", 0))
            model = models[key].to(memory_format=torch.contiguous_format)
            _trim()
            t = time_steps(spec, model, req["batch_size"], req.get("device", "cpu"),
                           req.get("algorithm", "default"), req["warmup"], req["steps"],
                           req.get("seed", 0))
            reply = {"timing": t.to_dict()}
        except MemoryError:
            reply = {"oom": "allocation failed"}
        except RuntimeError as e:
            if "out of memory" in str(e).lower() or "can't allocate" in str(e).lower():
                reply = {"oom": str(e)}
            else:
                reply = {"error": f"{type(e).__name__}: {e}"}
        except Exception as e:  # noqa: BLE001 - reported to the parent, which decides
            reply = {"error": f"{type(e).__name__}: {e}"}
        _trim()
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
