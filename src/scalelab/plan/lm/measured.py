"""A measured step carried to the plan: the compute model's compute scaled by measured /
estimated.

A workload file may give ``step_s``: one optimizer step measured on one ``device`` at
micro-batch ``batch_size`` (plain data parallelism on one GPU, no accumulation). The
compute model estimates that same step there; ``r = (step_s - optimizer) / compute`` of the
estimate is how far the model's compute is from this stack on this model, and every
layout's compute on the target is multiplied by ``r`` (the communication terms are the
target's links, unchanged): ``step' = step + (r - 1) compute``.
"""

from __future__ import annotations

from dataclasses import replace

from scalelab import hardware
from scalelab.errors import UsageError
from scalelab.parallel import ParallelLayout


def compute_factor(wl, precision: str, evaluate=None) -> float | None:
    """``r`` of the module docstring, or None without a measured step."""
    if wl.step_s is None:
        return None
    from scalelab.plan.lm.step import LMTarget, lm_step

    dev = hardware.device(wl.device)
    link = hardware.link(dev.intra_node or "pcie4").bandwidth_Bps
    one = LMTarget(device=dev.name, gpus_per_node=1, nodes=1, intra_node_Bps=link,
                   inter_node_Bps=link)
    lay = ParallelLayout(micro_batch=wl.micro_batch, precision=precision)
    est = (evaluate or lm_step)(wl.model, lay, wl.seq_len, one)
    rest = est.step_s - est.compute_s
    if not wl.step_s > rest:
        raise UsageError(f"{wl.path or 'workload'}: step_s {wl.step_s} s is shorter than "
                         f"what the model gives the step beside its compute on the "
                         f"{dev.name} ({rest:.3g} s): not a step of batch {wl.micro_batch} at "
                         f"seq {wl.seq_len}?")
    return (wl.step_s - rest) / est.compute_s


def scaled(step, r: float):
    """``step`` with its compute multiplied by ``r`` (module docstring)."""
    step_s = step.step_s + (r - 1.0) * step.compute_s
    k = step.step_s / step_s
    return replace(step, compute_s=step.compute_s * r, step_s=step_s,
                   tokens_per_s=step.tokens_per_s * k, mfu=step.mfu * k, hfu=step.hfu * k)


def scaled_evaluate(r: float, evaluate=None):
    """An evaluate function that scales each step's compute by ``r``."""
    def run(model, layout, seq_len, target):
        from scalelab.plan.lm.step import lm_step

        return scaled((evaluate or lm_step)(model, layout, seq_len, target), r)
    return run
