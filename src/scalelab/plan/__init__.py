"""The plan: profile + cluster -> predicted sweep and recommendation.

- :mod:`~scalelab.plan.step`: the model of one step (:func:`predict_step`).
- :mod:`~scalelab.plan.inputs`: what a plan starts from (profiles, workload files).
- :mod:`~scalelab.plan.cluster`: the machines (cluster.toml).
- :mod:`~scalelab.plan.compute`: compute time on the cluster's device.
- :mod:`~scalelab.plan.sweep`: every architecture at every device count.
- :mod:`~scalelab.plan.recommend`: :func:`plan`, the recommendation and its reasons
  (:mod:`~scalelab.plan.advice`, :mod:`~scalelab.plan.reasons`).

The numbers for a reader (:mod:`scalelab.text`, which the hardware estimate uses too) are
re-exported here.
"""

from scalelab.plan.calibration_input import (
    CalibrationInput,
    load_calibration,
    load_calibration_file,
)
from scalelab.plan.cluster import PLACEMENTS, Cluster, load_cluster
from scalelab.plan.compute import TargetCompute, target_compute
from scalelab.plan.inputs import (
    PlanInput,
    load_input,
    load_profile,
    load_workload,
    profile_from_dict,
    workload_from_dict,
)
from scalelab.plan.options import DEFAULT_MFU, LARGE_BATCH, PlanOptions
from scalelab.plan.reasons import Reason
from scalelab.plan.recommend import Plan, Recommendation, plan
from scalelab.plan.step import (
    ARCHITECTURES,
    BOTTLENECKS,
    ModelParams,
    StepPrediction,
    StepSetup,
    StepWorkload,
    predict_step,
)
from scalelab.plan.sweep import SweepRow, network_sweep, sweep_architecture
from scalelab.text import format_bytes, format_gbps, format_s

__all__ = [
    "ARCHITECTURES", "BOTTLENECKS", "CalibrationInput", "load_calibration_file",
    "DEFAULT_MFU", "LARGE_BATCH", "PLACEMENTS", "Cluster",
    "ModelParams", "Plan", "PlanInput", "PlanOptions", "Reason", "Recommendation",
    "StepPrediction", "StepSetup", "StepWorkload", "SweepRow", "TargetCompute",
    "format_bytes", "format_gbps", "format_s", "load_calibration", "load_cluster",
    "load_input", "load_profile", "load_workload", "network_sweep", "plan", "predict_step",
    "profile_from_dict", "sweep_architecture", "target_compute", "workload_from_dict",
]
