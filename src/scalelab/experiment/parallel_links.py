"""Tensor- and pipeline-parallel steps on an emulated network: predicted, then measured.

On a slower link only the traffic on a step's critical path slows it, so a case is
predicted before it runs from its step on loopback:

- **tensor parallelism**: every collective the step model counts is on the critical path
  (:func:`scalelab.theory.parallel.tp_collectives_per_layer` all-reduces of the ``b s h``
  activations per layer and micro-batch, or an all-gather and a reduce-scatter each with
  sequence parallelism; with it, too, the stage's input gradient and output gathered once
  per micro-batch and the norms' weight gradients all-reduced once per step, as DTensor
  does). ``T_link = T_loopback + X_link - X_loopback``, ``X`` that traffic replayed on
  Gloo (:func:`scalelab.experiment.sharded_timing.time_collectives`) on loopback and on
  the case's link.
- **a pipeline** of two stages on Gloo: every micro-batch's activation and gradient cross
  the boundary on the critical path, ``E(s) = 2 m s`` with ``s`` one send replayed
  (:func:`scalelab.theory.parallel.pp_p2p_rendezvous_s`):
  ``T_link = T_loopback + E(s_link) - E(s_loopback)``. A Gloo send does not start until
  its peer has posted the matching receive (gloo/transport/tcp/pair.cc: "sends cannot
  execute until the remote side is ready to receive"), and ``torch.distributed.pipelining``
  posts each receive just before the stage computes that micro-batch, so no send overlaps
  with compute. The step model's ``2 (v p - 1)`` exposed sends
  (:func:`scalelab.theory.parallel.pp_p2p_s`) are NCCL's under Megatron's schedule, which
  posts the next receive with the current send; the difference is this runner's, and the
  cases measure it.

Each replayed collective comes after an idle gap of the step's compute per collective
(``T_loopback`` less the traffic back to back on loopback, over the collectives): the
emulated link's token bucket (``scalelab.netem``: a burst of 64 KiB at line rate) refills
during compute as it does in the run, and the gaps cancel in the difference. Nothing is
fitted. The run on the emulated link is then measured, each rank a host of its own behind
a link shaped to the rate (:func:`scalelab.runner.parallel_run.run_parallel`).
"""

from __future__ import annotations

from dataclasses import dataclass

from scalelab.runner.parallel_config import ParallelRunConfig
from scalelab.theory import parallel as par
from scalelab.theory.sharded_step import Collective


def critical_traffic(cfg: ParallelRunConfig) -> tuple[list[Collective], int]:
    """(the collectives and sends of one step that the module's prediction replays, in the
    order the step issues them; the ranks of the group that runs them) for ``cfg``'s
    layout: tensor parallelism (tp > 1, pp 1) or a pipeline of two stages (tp 1). For the
    pipeline: one send each way (the prediction scales them)."""
    lay, m = cfg.layout, cfg.model
    if lay.dp != 1 or lay.cp != 1 or (lay.tp > 1) == (lay.pp > 1):
        raise ValueError(f"one of tp or pp, with dp 1 and cp 1: got {cfg.layout.to_dict()}")
    whole = lay.micro_batch * cfg.seq_len * m.hidden          # b s h values
    if lay.tp > 1:
        n = par.tp_collectives_per_layer(lay.recompute) * m.layers
        if not lay.sequence_parallel:
            return [Collective("all_reduce", whole)] * (n * lay.accumulation), lay.tp
        per_mb = ([Collective("all_gather", whole), Collective("reduce_scatter", whole)] * n
                  + [Collective("all_gather", whole)] * 2)  # the stage's output, input grad
        norms = 2 * (1 if m.style == "llama" else 2) * m.layers   # weights (and biases)
        return per_mb * lay.accumulation + [Collective("all_reduce", m.hidden)] * norms, lay.tp
    if lay.pp != 2 or lay.vpp != 1:
        raise ValueError(f"a pipeline of 2 stages (one boundary, two hosts), not {lay.pp}")
    return [Collective("send", whole, src=0), Collective("send", whole, src=1)], 2


@dataclass(frozen=True)
class LinkCase:
    """One case: the layout, the rate, and the figures of its prediction and its run."""

    name: str
    rate: str
    loopback_step_s: float
    traffic_loopback_s: float
    traffic_link_s: float
    measured_step_s: float

    @property
    def predicted_step_s(self) -> float:
        return self.loopback_step_s + self.traffic_link_s - self.traffic_loopback_s

    @property
    def error(self) -> float:
        return self.predicted_step_s / self.measured_step_s - 1.0

    def to_dict(self) -> dict:
        return {"name": self.name, "rate": self.rate, "loopback_step_s": self.loopback_step_s,
                "traffic_loopback_s": self.traffic_loopback_s,
                "traffic_link_s": self.traffic_link_s,
                "predicted_step_s": self.predicted_step_s,
                "measured_step_s": self.measured_step_s, "error": self.error}


def run_case(name: str, cfg: ParallelRunConfig, rate: str, repeats: int = 5,
             say=lambda msg: None) -> LinkCase:
    """Predict ``cfg`` on links of ``rate`` (module docstring), then run it there."""
    from scalelab.experiment.sharded_timing import time_collectives
    from scalelab.runner.parallel_run import run_parallel

    traffic, ranks = critical_traffic(cfg)
    say(f"{name}: the run on loopback")
    run = run_parallel(cfg.with_(emulate_network=None))
    loop = run["steps"]["step_s"]["median"]
    say(f"{name}: {len(traffic)} collectives on the critical path, on loopback and {rate}")
    alone = time_collectives(traffic, ranks, None, repeats=repeats)["exchange_s"]
    gap = max(0.0, loop - alone) / len(traffic)
    on_loop, on_link = (time_collectives(traffic, ranks, r, repeats=repeats,
                                         gap_s=gap)["exchange_s"] for r in (None, rate))
    if cfg.layout.pp > 1:   # one send each way: its time, the gap taken off
        on_loop, on_link = (par.pp_p2p_rendezvous_s(x / 2 - gap, cfg.layout.accumulation)
                            for x in (on_loop, on_link))
    say(f"{name}: the run on {rate}")
    measured = run_parallel(cfg.with_(emulate_network=rate))["steps"]["step_s"]["median"]
    return LinkCase(name, rate, loop, on_loop, on_link, measured)
