"""Benchmark one device the way the paper's procedure needs: step breakdown, the largest
batch that fits, the batch worth using, the fastest computation configuration, input I/O.

Python use::

    from scalelab.profiler import ProfileOptions, run_profile, measure_steps
    from scalelab.workload import WorkloadSpec
    prof = run_profile(WorkloadSpec("resnet18", input_shape=(3, 64, 64)),
                       ProfileOptions(batch_sizes=[2, 4]))
    t = measure_steps(WorkloadSpec("resnet18", input_shape=(3, 64, 64)), batch_size=8)
"""

import importlib

# Each public name and its module, imported when the name is first read: a plan that only
# counts memory (``scalelab.profiler.memory``) does not import the profiler (40 ms)
_HOMES = {"ProfileOptions": "profile", "cost_in_steps": "profile", "run_profile": "profile",
          "StepTiming": "timing", "measure_steps": "timing", "time_steps": "timing"}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
