"""Hand-written planner inputs (profile dicts in the DESIGN.md contract, workload files)."""

from __future__ import annotations

from scalelab.results import write_json


def profile_dict(step_s: float = 0.2, batch: int = 32, param_bytes: int = 100_000_000,
                 device: str = "cpu", device_name: str = "cpu",
                 flops_per_sample: float = 4e9, load_s_per_batch: float | None = None,
                 algorithm: str = "contiguous") -> dict:
    half = step_s * 0.55
    return {
        "environment": {"torch": "2.14.1", "device": device, "device_name": device_name,
                        "num_threads": 1},
        "workload": {"model": "tests.toy_models:linear", "input_shape": [3, 32, 32],
                     "num_classes": 10, "optimizer": "sgd", "param_count": param_bytes // 4,
                     "param_bytes": param_bytes,
                     "tensor_bytes": [param_bytes * 6 // 10, param_bytes * 3 // 10,
                                      param_bytes - param_bytes * 9 // 10],
                     "flops_per_sample": flops_per_sample},
        "batches": [
            {"batch_size": batch // 2, "forward_s": half / 3, "backward_s": half / 2,
             "optimizer_s": half / 6, "step_s": half, "step_s_spread": 0.01,
             "samples_per_s": batch / 2 / half, "peak_memory_bytes": 1_000_000},
            {"batch_size": batch, "forward_s": step_s / 3, "backward_s": step_s / 2,
             "optimizer_s": step_s / 6, "step_s": step_s, "step_s_spread": 0.01,
             "samples_per_s": batch / step_s, "peak_memory_bytes": 2_000_000},
        ],
        "fit": {"step_s": {"intercept": 2 * half - step_s,
                           "per_sample": (step_s - half) / (batch / 2)},
                "memory_bytes": {"intercept": 0, "per_sample": 62_500}},
        "memory_budget_bytes": 8_000_000,
        "max_batch_size": batch * 2,
        "recommended_batch_size": batch,
        "algorithms": {"chosen": algorithm, "candidates": [
            {"name": algorithm, "step_s": step_s, "peak_memory_bytes": 2_000_000, "fits": True}]},
        "io": {"source": "synthetic" if load_s_per_batch is None else "folder",
               "load_s_per_batch": load_s_per_batch,
               "loader_workers_needed": None},
    }


def write_profile(path, **kw):
    return write_json(path, "profile", profile_dict(**kw))


def write_text(path, text: str):
    path.write_text(text)
    return path
