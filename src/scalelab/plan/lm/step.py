"""One optimizer step of a transformer under a parallel layout on a target: :func:`lm_step`.

The step of the busiest pipeline stage, for m = ``accumulation`` micro-batches of b =
``micro_batch`` sequences:

    step = m T_mb                               compute (forward, backward, recomputation)
         + m L_stage T_tp                       tensor-parallel collectives, not overlapped
         + (p-1)/(v m) x m (T_mb + L_stage T_tp) the pipeline's bubble
         + 2 (v p - 1) T_p2p                    the first and last micro-batch's sends
         + exposed data-parallel exchange       after the last backward (ZeRO-3: per
                                                micro-batch, hidden behind its compute)
         + T_opt                                AdamW over the rank's shard

T_mb is the stage's layers (:func:`scalelab.plan.lm.compute.layer_times`: forward,
backward, a second forward under full recomputation, the attention core's forward under
selective) plus the embedding on stage 0 and the head and loss on the last stage (the
larger of the two sets the pace). The formulas are :mod:`scalelab.theory.parallel`'s, the
bytes :mod:`scalelab.theory.zero`'s, the FLOPs :mod:`scalelab.theory.lm`'s. Each collective
runs on the link it crosses (tensor groups innermost, as Megatron and torchtitan place
ranks: a group inside a node uses ``intra_node_Bps``, one that spans nodes the NIC share
``inter_node_Bps``), at the fitted fraction ``comm`` of it.

Cheap: what depends only on (model, sequence, micro-batch, tensor degree, device) is
cached, so a call is arithmetic on cached numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from scalelab import hardware
from scalelab.hardware import lm_fit
from scalelab.models.config import TransformerConfig
from scalelab.parallel import ParallelLayout
from scalelab.plan.lm import compute as lmc
from scalelab.plan.lm import memory as lmm
from scalelab.theory import lm as lm_theory
from scalelab.theory import parallel as par
from scalelab.theory import zero
from scalelab.theory.memory import MEMORY_MARGIN

#: how each stack runs: fused attention kernel, bytes of an exchanged gradient element
STACKS = {"pytorch": {"fused_attention": True, "grad_bytes": 4.0},
          "megatron": {"fused_attention": False, "grad_bytes": 2.0}}


@dataclass(frozen=True)
class LMTarget:
    """The machines a layout runs on."""

    device: str               # hardware catalog name, e.g. "H100-SXM"
    gpus_per_node: int
    nodes: int
    intra_node_Bps: float     # per-direction GPU-to-GPU bandwidth inside a node
    inter_node_Bps: float     # per-GPU share of the node's NIC bandwidth, per direction
    latency_s: float = 5e-6
    memory_bytes: float = 0.0  # 0: the device's memory from the catalog
    memory_margin: float = MEMORY_MARGIN

    def __post_init__(self):
        dev = hardware.device(self.device)
        object.__setattr__(self, "device", dev.name)
        for k in ("gpus_per_node", "nodes"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{k} must be a positive integer, got {v!r}")
        for k in ("intra_node_Bps", "inter_node_Bps"):
            if not getattr(self, k) > 0:
                raise ValueError(f"{k} must be > 0, got {getattr(self, k)!r}")
        if not self.memory_bytes:
            if not dev.memory_bytes:
                raise ValueError(f"{dev.name}'s memory is not in the catalog: give memory_bytes")
            object.__setattr__(self, "memory_bytes", float(dev.memory_bytes))
        if not 0 < self.memory_margin <= 1:
            raise ValueError(f"memory_margin must be in (0, 1], got {self.memory_margin!r}")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @classmethod
    def from_cluster(cls, cluster) -> LMTarget:
        """From :class:`scalelab.plan.cluster.Cluster` (its device must be named)."""
        if cluster.device is None:
            raise ValueError("the cluster names no device: a language-model plan needs one")
        intra, _ = cluster.intra_link()
        nic = cluster.network_Bps()
        per_nic, _ = cluster.nic_sharing()
        inter = nic / per_nic if math.isfinite(nic) else intra
        return cls(device=cluster.device, gpus_per_node=cluster.gpus_per_node,
                   nodes=cluster.nodes, intra_node_Bps=intra, inter_node_Bps=inter,
                   latency_s=cluster.latency_s if cluster.latency_s is not None else 5e-6)


@dataclass(frozen=True)
class LMStep:
    model: TransformerConfig
    layout: ParallelLayout
    seq_len: int
    compute_s: float
    tp_comm_s: float
    pp_bubble_s: float
    pp_p2p_s: float
    dp_exchange_s: float
    step_s: float             # one global batch (one optimizer step)
    tokens_per_s: float       # whole cluster
    mfu: float
    hfu: float
    memory_bytes: float       # per GPU, peak
    memory: dict              # breakdown, bytes: params, grads, optimizer, activations, buffers
    fits: bool
    band: tuple[float, float]  # relative band of step_s from held-out evidence
    notes: tuple[str, ...]    # where each number came from
    optimizer_s: float = 0.0
    stack: str = "pytorch"

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.layout.gpus


def _link(group: int, stride: int, target: LMTarget) -> float:
    """Bandwidth of a group of ``group`` ranks ``stride`` apart: inside a node when the
    group's span fits one, else the NIC share."""
    return (target.intra_node_Bps if group * stride <= target.gpus_per_node
            else target.inter_node_Bps)


@lru_cache(maxsize=4096)
def _fit(stack: str, device: str) -> tuple[lm_fit.Efficiency, tuple[float, float], str]:
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r} ({', '.join(STACKS)})")
    f = lm_fit.stack_fit(stack)
    gen = hardware.device(device).generation
    note = (f"compute factors: the {stack} fit ({f.fitted_on}; {f.source})"
            + ("" if gen == "ampere" else f"; carried to the {device}'s peaks"))
    return f.efficiency, f.band, note


@lru_cache(maxsize=65536)
def _micro_batch(cfg, seq, b, tp, sp, recompute, precision, device, eff, fused, pp, vpp):
    """(stage seconds per micro-batch, its last backward, layers per stage, FLOPs)."""
    lt = lmc.layer_times(cfg, seq, b, tp, sp, precision, device, eff, fused)
    ends = lmc.end_times(cfg, seq, b, tp, precision, device, eff)
    layers = math.ceil(cfg.layers / pp)
    rec = {"full": lt.forward_s, "selective": lt.attention_fwd_s}.get(recompute, 0.0)
    body = layers * (lt.forward_s + lt.backward_s + rec)
    first = ends.embed_fwd_s + ends.embed_bwd_s
    last = ends.head_fwd_s + ends.head_bwd_s
    stage = body + (first + last if pp == 1 else max(first, last))
    bwd = layers * (lt.backward_s + rec) + (ends.head_bwd_s if pp == 1 else 0.0)
    return stage, bwd / vpp, layers


def lm_step(model: TransformerConfig, layout: ParallelLayout, seq_len: int,
            target: LMTarget, *, stack: str = "pytorch") -> LMStep:
    """The step of ``layout`` training ``model`` at ``seq_len`` on ``target`` (module
    docstring). ``stack``: which fitted framework (:data:`STACKS`)."""
    lay, cfg = layout, model
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
    if lay.gpus > target.gpus:
        raise ValueError(f"{lay.describe()} needs {lay.gpus} GPUs; the target has "
                         f"{target.gpus}")
    eff, band, fit_note = _fit(stack, target.device)
    st = STACKS[stack]
    prec = lay.precision
    w = lmc.value_bytes(prec)
    b, m, tp, pp = lay.micro_batch, lay.accumulation, lay.tp, lay.pp
    seq_loc = seq_len // lay.cp if lay.cp > 1 else seq_len
    stage_s, last_bwd_s, layers = _micro_batch(
        cfg, seq_loc, b, tp, lay.sequence_parallel, lay.recompute, prec, target.device,
        eff, st["fused_attention"], pp, lay.vpp)
    lat = target.latency_s
    tp_layer = par.tp_layer_s(b, seq_loc, cfg.hidden, tp, _link(tp, 1, target) * eff.comm,
                              lat, value_bytes=w, sequence_parallel=lay.sequence_parallel,
                              recompute=lay.recompute)
    cp_layer = par.cp_ring_s(b, seq_len, cfg.kv_dim, lay.cp, _link(lay.cp, tp, target)
                             * eff.comm, lat, w) if lay.cp > 1 else 0.0
    mb_s = stage_s + layers * max(0.0, cp_layer - 0.0)
    compute_s = m * mb_s
    tp_comm_s = m * layers * tp_layer
    bubble = par.bubble_fraction(pp, m, lay.schedule, lay.vpp) * (compute_s + tp_comm_s)
    p2p_bw = _link(pp, lay.gpus // pp, target) * eff.comm if pp > 1 else 1.0
    p2p = par.pp_p2p_s(b, seq_loc, cfg.hidden, pp, m, p2p_bw, lat, value_bytes=w, tp=tp,
                       sequence_parallel=lay.sequence_parallel, vpp=lay.vpp)
    first, last = lmm.stage_params(cfg, pp)
    rank_params = max(first, last) / tp
    dp_s = _dp_exposed(rank_params, lay, target, eff, st["grad_bytes"], mb_s, last_bwd_s)
    opt_params = rank_params / (lay.dp if lay.zero >= 1 else 1)
    opt_s = lmc.optimizer_s(opt_params, target.device, eff)
    step_s = compute_s + tp_comm_s + bubble + p2p + dp_s + opt_s
    tokens_per_s = lay.global_batch * seq_len / step_s
    peak = lmc.peak_flops(target.device, prec)
    n = cfg.non_embedding_params()
    model_f = lm_theory.flops_per_token(n, cfg.layers, cfg.hidden, seq_len)
    hw_f = lm_theory.hfu_flops_per_token(n, cfg.layers, cfg.hidden, seq_len, lay.recompute)
    mem = lmm.memory_per_gpu(cfg, lay, seq_len)
    usable = target.memory_bytes * target.memory_margin
    notes = (f"MFU: 6N + 12 L h s = {model_f:.4g} FLOPs per token (N without the "
             f"embedding, PaLM's and torchtitan's count) over the {target.device}'s dense "
             f"{prec} peak {peak / 1e12:g} TFLOP/s",
             fit_note,
             f"memory: model state at {lmm.state_scheme(prec)} bytes per parameter, "
             f"Korthikanti et al. 2022 activations x {lay.recompute} recomputation")
    return LMStep(cfg, lay, seq_len, compute_s, tp_comm_s, bubble, p2p, dp_s, step_s,
                  tokens_per_s, tokens_per_s * model_f / (lay.gpus * peak),
                  tokens_per_s * hw_f / (lay.gpus * peak), mem.total, mem.to_dict(),
                  mem.total <= usable, band, notes, opt_s, stack)


def _dp_exposed(rank_params: float, lay: ParallelLayout, target: LMTarget, eff,
                grad_bytes: float, mb_s: float, last_bwd_s: float) -> float:
    """The data-parallel exchange left on the step (module docstring)."""
    if lay.dp <= 1:
        return 0.0
    stride = lay.tp * lay.cp
    bw = _link(lay.dp, stride, target) * eff.comm
    lat = target.latency_s
    pb = lmc.value_bytes(lay.precision)
    if lay.zero == 3:
        # FSDP: per micro-batch, all-gather in forward and in backward (16-bit), reduce-
        # scatter of the gradients; prefetched behind the micro-batch's compute
        gather = 2.0 * (lay.dp - 1) / lay.dp * rank_params * pb / bw
        scatter = (lay.dp - 1) / lay.dp * rank_params * grad_bytes / bw
        per_mb = gather + scatter + 3 * (lay.dp - 1) * lat
        return lay.accumulation * max(0.0, per_mb - eff.overlap * mb_s)
    x = zero.exchange_s(rank_params, lay.dp, lay.layout, bw, lat,
                        param_bytes_per_param=pb, grad_bytes_per_param=grad_bytes)
    return par.dp_exposed_s(x, last_bwd_s, eff.overlap)
