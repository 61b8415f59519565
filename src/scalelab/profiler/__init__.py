"""Benchmark one device the way the paper's procedure needs: step breakdown, the largest
batch that fits, the batch worth using, the fastest computation configuration, input I/O.

Python use::

    from scalelab.profiler import ProfileOptions, run_profile, measure_steps
    from scalelab.workload import WorkloadSpec
    prof = run_profile(WorkloadSpec("resnet18", input_shape=(3, 64, 64)),
                       ProfileOptions(batch_sizes=[2, 4]))
    t = measure_steps(WorkloadSpec("resnet18", input_shape=(3, 64, 64)), batch_size=8)
"""

from scalelab.profiler.profile import ProfileOptions, cost_in_steps, run_profile
from scalelab.profiler.timing import StepTiming, measure_steps, time_steps

__all__ = ["ProfileOptions", "StepTiming", "cost_in_steps", "measure_steps", "run_profile",
           "time_steps"]
