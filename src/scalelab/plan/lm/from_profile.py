"""A language model's profile (measured here, often on a reduced copy) as the plan's check
of structure.

A profile measured on this machine (a CPU, or a GPU other than the target) cannot give the
target's step: the step model does. What it gives is the structure the plan sizes, counted
from the module that really ran: its parameters (``param_count``, every tensor of the
built model) and its training FLOPs per token (``flops_per_token``, PyTorch's FLOP
counter). :func:`structure_check` holds both against the configuration's own counts for the
same (reduced) copy, ``param_count()`` and ``6 N + 12 L h s`` (:mod:`scalelab.theory.lm`):
a plan is only as right as the shape it was given. A parameter count more than
:data:`TOLERANCE` apart is a warning; the FLOPs are shown beside the formula's (the counter
also counts products the MFU convention leaves out, such as a tied head's).
"""

from __future__ import annotations

from typing import Any

from scalelab.errors import UsageError
from scalelab.models.config import TransformerConfig
from scalelab.plan.lm.inputs import LMWorkload, resolve_model
from scalelab.theory import lm as lm_theory

#: the relative difference beyond which a profile's count and the configuration's disagree
TOLERANCE = 0.005


def workload_of(profile: dict[str, Any]) -> LMWorkload:
    """The full model a language model's profile measured (a copy of, perhaps reduced)."""
    wl = profile.get("workload") or {}
    name = wl.get("model")
    seq = wl.get("seq_len") or wl.get("tokens_per_sample")
    if not (isinstance(name, str) and isinstance(seq, int) and seq > 0):
        raise UsageError("the profile is not of a language model (no model or seq_len)")
    return LMWorkload(resolve_model(name), name, seq_len=seq)


def structure_check(profile: dict[str, Any], full: TransformerConfig) -> dict[str, Any]:
    """The profile's counts against the configuration's for the copy it ran."""
    wl = profile.get("workload") or {}
    layers = wl.get("layers") or full.layers
    cfg = full.with_layers(layers) if layers != full.layers else full
    seq = wl.get("seq_len") or wl.get("tokens_per_sample")
    expected_params = cfg.param_count()
    out: dict[str, Any] = {"profiled_layers": layers, "layers": full.layers,
                           "param_count": wl.get("param_count"),
                           "expected_param_count": expected_params,
                           "flops_per_token": wl.get("flops_per_token"),
                           "expected_flops_per_token": lm_theory.flops_per_token(
                               cfg.non_embedding_params(), cfg.layers, cfg.hidden, seq)}
    for key in ("param_count", "flops_per_token"):
        got, want = out[key], out[f"expected_{key}"]
        out[f"{key}_error"] = (got / want - 1.0) if isinstance(got, (int, float)) else None
    return out


def structure_lines(check: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(reasons, warnings) of a structure check."""
    reasons, warnings = [], []
    copy = (f"a {check['profiled_layers']}-layer copy" if check["profiled_layers"]
            != check["layers"] else "the model")
    for key, what in (("param_count", "parameters"), ("flops_per_token", "training FLOPs per "
                                                      "token (PyTorch's counter; 6N + 12 L h s "
                                                      "expected)")):
        err = check.get(f"{key}_error")
        if err is None:
            continue
        line = (f"profiled here ({copy}): {check[key]:,.0f} {what} against "
                f"{check[f'expected_{key}']:,.0f} from its configuration ({err:+.2%})")
        # the FLOP counter also counts what the MFU convention leaves out (a tied head's
        # product, the norms): a difference there is information, not a mismatch
        mismatch = key == "param_count" and abs(err) > TOLERANCE
        (warnings if mismatch else reasons).append(line)
    return reasons, warnings


def plan_from_profile(profile: dict[str, Any], cluster, name: str) -> dict[str, Any]:
    """plan.json of the full model a language model's profile measured, on ``cluster``,
    with the profile's structure check among its reasons and warnings (``advise``)."""
    from scalelab.plan.lm.recommend import lm_plan
    from scalelab.plan.lm.space import Choices

    wl = workload_of(profile)
    data = lm_plan(wl, [cluster], Choices()).to_dict()
    check = structure_check(profile, wl.model)
    reasons, warnings = structure_lines(check)
    data["inputs"]["cluster_name"] = name
    data["inputs"]["profile_check"] = check
    data["recommendation"]["reasons"] = reasons + data["recommendation"]["reasons"]
    data["warnings"] = warnings + data["warnings"]
    return data
