"""Memory per GPU of a transformer under a parallel layout: state, activations, buffers.

- **Model state** of the stage a rank holds, ``/ t`` for the tensor split: parameters,
  gradients and AdamW's state at the bytes per parameter of
  :func:`scalelab.theory.lm.state_bytes_per_param`, sharded over the dp ranks by the ZeRO
  level (:func:`scalelab.theory.zero.model_state`). Stage 0 holds the embedding, the last
  stage the head and final norm (a tied head is the embedding's tensor: on one stage it is
  one tensor; across stages the last keeps its own copy, as Megatron does).
- **Activations**: Korthikanti et al.'s bytes per layer
  (:func:`scalelab.theory.lm.korthikanti_bytes_per_layer`, scaled by f / 4h for the MLP
  width and to 4-byte values in fp32), times the stage's layers, times the micro-batches
  the schedule keeps in flight (:func:`scalelab.theory.parallel.in_flight_micro_batches`).
  With full recomputation one layer's full activations are live again during its
  backward. The last stage adds the logits (16-bit, and their fp32 copy for the loss).
- **Buffers**: ZeRO-3's unsharded 16-bit parameters of two blocks (the one computing and
  the one prefetched: :func:`scalelab.theory.zero.transient_bytes`).

The peak is the larger of stage 0's and the last stage's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from scalelab.theory import lm as lm_theory
from scalelab.theory import parallel as par
from scalelab.theory.zero import model_state


@dataclass(frozen=True)
class Memory:
    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.buffers

    def to_dict(self) -> dict:
        return {"params": self.params, "grads": self.grads, "optimizer": self.optimizer,
                "activations": self.activations, "buffers": self.buffers}


def state_scheme(precision: str) -> str:
    """The state bytes the precision implies: fp32 training keeps 16 bytes as
    mixed-precision AdamW under autocast does (``torch-amp``)."""
    return "fp32" if precision in ("fp32", "tf32") else "torch-amp"


@lru_cache(maxsize=65536)
def layer_activation_bytes(cfg, seq: int, batch: int, tp: int, sequence_parallel: bool,
                           recompute: str, precision: str, flash: bool = True) -> float:
    """One layer's saved activations on one rank (module docstring)."""
    base = lm_theory.korthikanti_bytes_per_layer(seq, batch, cfg.hidden, cfg.heads, tp,
                                                 sequence_parallel, recompute, flash)
    if recompute != "full":
        # 16 of the MLP's 19 s b h are its two f-wide tensors (GELU's input, the second
        # product's input) at f = 4h: they scale with f / 4h, and SwiGLU keeps four
        # (gate, up, SiLU(gate), their product): 2 x
        mlp_scale = cfg.ffn / (4.0 * cfg.hidden) * (2.0 if cfg.style == "llama" else 1.0)
        sbh = seq * batch * cfg.hidden / (tp if (sequence_parallel or tp > 1) else 1)
        base += 16.0 * sbh * (mlp_scale - 1.0)
    return base * (2.0 if precision in ("fp32", "tf32") else 1.0)


@lru_cache(maxsize=4096)
def stage_params(cfg, pp: int) -> tuple[float, float]:
    """(parameters of stage 0, of the last stage), whole (before the tensor split)."""
    per = cfg.block_params() * math.ceil(cfg.layers / pp)
    if pp == 1:
        return float(cfg.param_count()), float(cfg.param_count())
    first = per + cfg.embedding_params()
    last = per + cfg.norm_params() + (cfg.vocab * cfg.hidden if cfg.tied else
                                      cfg.head_params())
    return float(first), float(last)


@lru_cache(maxsize=65536)
def _activations(cfg, seq: int, b: int, tp: int, sp: bool, recompute: str, precision: str,
                 pp: int, m: int, schedule: str, vpp: int) -> tuple[float, float]:
    """(stage 0's activation bytes at its peak, the last stage's), cached."""
    w = 4.0 if precision in ("fp32", "tf32") else 2.0
    per_layer = layer_activation_bytes(cfg, seq, b, tp, sp, recompute, precision)
    layers = math.ceil(cfg.layers / pp)
    flight = par.in_flight_micro_batches(pp, m, schedule, vpp)
    act0 = per_layer * layers * flight
    if recompute == "full":
        act0 += layer_activation_bytes(cfg, seq, b, tp, sp, "none", precision)
    logits = seq * b * cfg.vocab / tp * (w + 4.0)
    act_last = per_layer * layers * (1.0 if pp > 1 else flight) + logits
    if pp == 1:
        act0 = act_last = act0 + logits
    return act0, act_last


@lru_cache(maxsize=65536)
def _state(params: float, dp: int, layout: str, precision: str) -> tuple[float, float, float]:
    scheme = lm_theory.state_bytes_per_param(state_scheme(precision))
    st = model_state(params, dp, layout, param_bytes_per_param=scheme["params"],
                     grad_bytes_per_param=scheme["grads"],
                     optimizer_bytes_per_param=scheme["optimizer"])
    return st.param_bytes, st.grad_bytes, st.optimizer_bytes


def memory_per_gpu(cfg, layout, seq: int) -> Memory:
    """The peak bytes of the busiest GPU (module docstring)."""
    lay = layout
    first, last = stage_params(cfg, lay.pp)
    # context parallelism: each rank keeps the activations of its s / cp tokens
    act0, act_last = _activations(cfg, seq // lay.cp, lay.micro_batch, lay.tp,
                                  lay.sequence_parallel,
                                  lay.recompute, lay.precision, lay.pp, lay.accumulation,
                                  lay.schedule, lay.vpp)
    buffers = 0.0
    if lay.zero == 3 and lay.dp > 1:
        w = 4.0 if lay.precision in ("fp32", "tf32") else 2.0
        buffers = 2.0 * cfg.block_params() / lay.tp * w
    best = None
    for params, act in ((first, act0), (last, act_last)):
        p, g, k = _state(params / lay.tp, lay.dp, lay.layout, lay.precision)
        total = p + g + k + act + buffers
        if best is None or total > best[0]:
            best = (total, Memory(p, g, k, act, buffers))
    return best[1]
