"""One optimizer step of a transformer under a parallel layout on a target: :func:`lm_step`.

The step of the busiest pipeline stage, for m = ``accumulation`` micro-batches of b =
``micro_batch`` sequences:

    step = m T_mb                               compute (forward, backward, recomputation)
         + m L_stage T_tp                       tensor-parallel collectives, not overlapped
         + (p-1)/(v m) x m T_other              the pipeline's bubble: the other stages
         + 2 (v p - 1) T_p2p                    the first and last micro-batch's sends
           (+ (v m - 1) max(0, T_p2p - F)         and every other one that outlasts a
              + ... for B)                       stage's forward F or backward B of a
                                                micro-batch (:func:`p2p_link_bound_s`)
         + exposed data-parallel exchange       after the last backward (ZeRO-3: per
                                                block, hidden behind its compute)
         + T_opt                                AdamW over the rank's shard

T_mb is the stage's layers (:func:`scalelab.plan.lm.compute.layer_work`: forward, backward,
a second forward under full recomputation, the attention core's forward under selective,
and the stack's per-micro-batch gradient accumulation) plus the embedding on stage 0 and
the head and loss on the last stage (the larger of the two sets the pace); T_other, what
the bubble waits for, the mean micro-batch of the other stages (a pipeline of m identical
micro-batches over stages of times T_s takes ``sum_s T_s + (m-1) max_s T_s``: the bubble is
the other stages', not p-1 copies of the slowest). The formulas are
:mod:`scalelab.theory.parallel`'s, the bytes :mod:`scalelab.theory.zero`'s, the FLOPs
:mod:`scalelab.theory.lm`'s. Each collective runs on the link it crosses (tensor groups
innermost, as Megatron and torchtitan place ranks: a group inside a node uses
``intra_node_Bps``, one that spans nodes the NIC share ``inter_node_Bps``), at the fitted
fraction ``comm`` of it.

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

#: how each stack runs: fused attention kernel, bytes of an exchanged gradient element,
#: bytes the loss moves per logit (None: a fused cross-entropy), bytes per parameter each
#: micro-batch's gradient accumulation moves outside the products (megatron: the weight-
#: gradient product writes the 16-bit gradient, 2, and Megatron's DDP hook
#: ``param.main_grad.add_(param.grad)`` reads it, 2, and reads and writes the fp32
#: ``main_grad``, 8: megatron/model/distributed.py, ``accumulate_allreduce_grads_in_fp32``;
#: FSDP reduce-scatters each micro-batch's gradient instead, counted in its exchange)
STACKS = {"pytorch": {"fused_attention": True, "grad_bytes": 4.0, "loss_bytes": None,
                      "grad_accum_bytes": 0.0},
          "megatron": {"fused_attention": False, "grad_bytes": 2.0,
                       "loss_bytes": lmc.MEGATRON_LOSS_BYTES, "grad_accum_bytes": 12.0}}


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
    """Per-direction bandwidth a ring of ``group`` ranks ``stride`` apart reaches.

    Inside a node (the group's span fits one): the GPU-to-GPU link. Across nodes, NCCL runs
    one ring per NIC and each ring enters a node once: with ``g`` of the group's ranks on
    each of its ``n`` nodes, a rank's ``(N-1)/N S`` bytes take as long as the node's
    ``(n-1)/n S`` over its ``g`` NIC shares, so the ring reaches ``g B_nic (N-1)/N /
    ((n-1)/n)``, capped by the GPU-to-GPU link (the ring's in-node hops).
    """
    if group <= 1 or group * stride <= target.gpus_per_node:
        return target.intra_node_Bps
    g = max(1, target.gpus_per_node // stride)
    n = group / g
    ratio = ((group - 1) / group) / ((n - 1) / n)
    return min(target.intra_node_Bps, g * target.inter_node_Bps * ratio)


@lru_cache(maxsize=4096)
def _fit(stack: str, device: str) -> tuple[lm_fit.Efficiency, tuple[float, float], str]:
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r} ({', '.join(STACKS)})")
    f = lm_fit.stack_fit(stack)
    gen = hardware.device(device).generation
    note = (f"compute factors: the {stack} fit ({f.fitted_on}; {f.source})"
            + ("" if gen == "ampere" else f"; carried to the {device}'s peaks"))
    return f.efficiency, f.band, note


@dataclass(frozen=True)
class Terms:
    """A step's parts before the fitted factors apply (:mod:`scalelab.plan.lm.fit` fits
    on them): compute as :data:`~scalelab.plan.lm.compute.Work`, communication as seconds
    at the link's full bandwidth plus latency."""

    micro_batch: lmc.Work      # one micro-batch on the busiest stage
    other_stage: lmc.Work      # one micro-batch on the others (their mean; = micro_batch
                               # without a pipeline): what the bubble waits for
    last_backward: lmc.Work    # the last micro-batch's backward (what the exchange hides in)
    micro_batches: int
    bubble: float              # the pipeline's bubble fraction
    tp_s: float                # per micro-batch, all its layers, at full bandwidth
    tp_latency_s: float
    tp_steps: float            # latency-bound ring steps of those collectives
    p2p_s: float
    p2p_latency_s: float
    dp_s: float                # the exchange at full bandwidth (ZeRO-3: per micro-batch)
    dp_latency_s: float
    dp_per_micro_batch: bool   # ZeRO-3 gathers and scatters every micro-batch
    dp_gather_share: float     # ZeRO-3: the share of dp_s one all-gather of the parameters is
    layers: int                # blocks on the busiest stage (ZeRO-3's units)
    layer_forward: lmc.Work    # one block's forward, one micro-batch
    layer_backward: lmc.Work   # one block's backward with its recomputation
    optimizer: lmc.Work
    rank_params: float
    p2p_sends: int = 0         # the sends p2p_s counts: 2 (v p - 1)
    vpp: int = 1


def p2p_link_bound_s(t: Terms, eff: lm_fit.Efficiency) -> float:
    """The pipeline's sends exposed beyond the first and last micro-batch's when one send
    outlasts a stage's forward or backward of a micro-batch
    (:func:`scalelab.theory.parallel.pp_link_bound_s`)."""
    if not t.p2p_sends:
        return 0.0
    one = (t.p2p_s / eff.comm + t.p2p_latency_s) / t.p2p_sends
    fwd = t.layers * lmc.device_s(t.layer_forward, eff)
    bwd = t.layers * lmc.device_s(t.layer_backward, eff)
    return par.pp_link_bound_s(one, fwd, bwd, t.micro_batches, t.vpp)


@lru_cache(maxsize=65536)
def _shape(cfg, seq_len: int, b: int, tp: int, sp: bool, recompute: str, precision: str,
           pp: int, vpp: int, cp: int, target: LMTarget, stack: str) -> tuple:
    """What depends on the shape of a micro-batch on one rank, not on dp or the ZeRO level
    (cached: the search's layouts share it): (micro-batch work, last backward work, tp
    seconds, tp latency, tp ring steps, rank parameters)."""
    st = STACKS[stack]
    w = lmc.value_bytes(precision)
    seq = seq_len // cp
    lw = lmc.layer_work(cfg, seq, b, tp, sp, precision, target.device,
                        st["fused_attention"])
    ends = lmc.end_work(cfg, seq, b, tp, precision, target.device, st["loss_bytes"])
    layers = math.ceil(cfg.layers / pp)
    rec = {"full": lw.forward, "selective": lw.attention_forward}.get(
        recompute, (0.0, 0.0, 0.0, 0.0))
    body = lmc.scale(layers, lmc.add(lw.forward, lw.backward, rec))
    first, last = lmm.stage_params(cfg, pp)
    accum = lmc.optimizer_work(max(first, last) / tp, target.device, st["grad_accum_bytes"])
    body = lmc.add(body, accum)
    if pp == 1:
        mb = other = lmc.add(body, ends.embedding, ends.head)
    else:
        # the busiest stage sets the steady state; the bubble is the other stages' time
        # (a flow shop of m identical jobs: sum of the stages + (m-1) x the slowest), their
        # mean being the layers and one end's share
        edge, small = sorted((ends.embedding, ends.head), key=lambda x: x[0] + x[2])[::-1]
        mb = lmc.add(body, edge)
        other = lmc.add(body, lmc.scale(1.0 / (pp - 1), small))
    last_bwd = lmc.scale(layers / vpp, lmc.add(lw.backward, rec))
    layer_bwd = lmc.add(lw.backward, rec)
    lat = target.latency_s
    tp_s = layers * par.tp_layer_s(b, seq, cfg.hidden, tp, _link(tp, 1, target), 0.0,
                                   value_bytes=w, sequence_parallel=sp, recompute=recompute)
    # a ring all-reduce (or all-gather + reduce-scatter) takes 2 (t-1) latency-bound steps
    tp_steps = layers * par.tp_collectives_per_layer(recompute) * 2 * (tp - 1) if tp > 1 else 0
    tp_lat = tp_steps * lat
    if cp > 1:
        tp_s += layers * par.cp_ring_s(b, seq_len, cfg.kv_dim, cp, _link(cp, tp, target),
                                       0.0, w)
        tp_lat += layers * 3 * (cp - 1) * lat
    return (mb, other, last_bwd, tp_s, tp_lat, tp_steps, max(first, last) / tp, layers,
            lw.forward, layer_bwd)


def terms(cfg: TransformerConfig, lay: ParallelLayout, seq_len: int, target: LMTarget,
          stack: str = "pytorch") -> Terms:
    """The step's parts (module docstring) with no fitted factor applied."""
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r} ({', '.join(STACKS)})")
    w = lmc.value_bytes(lay.precision)
    b, m, tp, pp = lay.micro_batch, lay.accumulation, lay.tp, lay.pp
    (mb, other, last_bwd, tp_s, tp_lat, tp_steps, rank_params, layers, layer_fwd,
     layer_bwd) = _shape(
        cfg, seq_len, b, tp, lay.sequence_parallel, lay.recompute, lay.precision, pp,
        lay.vpp, lay.cp, target, stack)
    lat = target.latency_s
    p2p_s = p2p_lat = 0.0
    if pp > 1:
        p2p_s = par.pp_p2p_s(b, seq_len // lay.cp, cfg.hidden, pp, m,
                             _link(pp, lay.gpus // pp, target), 0.0, value_bytes=w, tp=tp,
                             sequence_parallel=lay.sequence_parallel, vpp=lay.vpp)
        p2p_lat = 2.0 * (lay.vpp * pp - 1) * lat
    dp_s = dp_lat = gather = 0.0
    if lay.dp > 1:
        bw = _link(lay.dp, tp * lay.cp, target)
        grad_bytes = STACKS[stack]["grad_bytes"]
        if lay.zero == 3:
            dp_s = (2.0 * w + grad_bytes) * (lay.dp - 1) / lay.dp * rank_params / bw
            gather = w / (2.0 * w + grad_bytes)
            dp_lat = 3 * (lay.dp - 1) * lat
        else:
            dp_s = zero.exchange_s(rank_params, lay.dp, lay.layout, bw, 0.0,
                                   param_bytes_per_param=w, grad_bytes_per_param=grad_bytes)
            dp_lat = 2 * (lay.dp - 1) * lat
    opt = lmc.optimizer_work(rank_params / (lay.dp if lay.zero >= 1 else 1), target.device)
    return Terms(mb, other, last_bwd, m, par.bubble_fraction(pp, m, lay.schedule, lay.vpp), tp_s,
                 tp_lat, tp_steps, p2p_s, p2p_lat, dp_s, dp_lat, lay.zero == 3, gather, layers,
                 layer_fwd, layer_bwd, opt, rank_params,
                 2 * (lay.vpp * pp - 1) if pp > 1 else 0, lay.vpp)


def step_seconds(t: Terms, eff: lm_fit.Efficiency) -> tuple[float, ...]:
    """(compute, tp, bubble, p2p, dp exposed, optimizer + fixed, step) seconds of ``t`` at
    ``eff``. A micro-batch takes the longer of the device's time (its compute, its
    tensor-parallel collectives' bytes and a fitted time per latency-bound ring step of
    those collectives, all in one stream: NCCL's ring kernel occupies the device while it
    waits on its peers' flags, time the device has to spare when the host is the slower
    side) and the host's time to issue its layer passes, plus, in a pipeline, a fitted
    time per micro-batch for the stage's blocking sends and receives (their setup and
    synchronization; the bytes are the p2p term). The pipeline's bubble is the other
    stages' micro-batch time (:class:`Terms` ``other_stage``). The tensor-parallel term is
    what the collectives add beyond the compute."""
    tp_bytes = t.tp_s / eff.comm + t.tp_latency_s + t.tp_steps * eff.collective_s
    fixed = eff.p2p_s if t.bubble > 0 else 0.0
    dev = lmc.device_s(t.micro_batch, eff)
    host = lmc.host_s(t.micro_batch, eff)
    mb = max(dev + tp_bytes, host) + fixed
    other = max(lmc.device_s(t.other_stage, eff) + tp_bytes,
                lmc.host_s(t.other_stage, eff)) + fixed
    compute = t.micro_batches * max(dev, host)
    tp = t.micro_batches * mb - compute
    bubble = t.bubble * t.micro_batches * other
    p2p = t.p2p_s / eff.comm + t.p2p_latency_s + p2p_link_bound_s(t, eff)
    x = t.dp_s / eff.comm + t.dp_latency_s
    if t.dp_per_micro_batch:
        dp = t.micro_batches * zero3_exposed_s(t, x, eff)
    else:
        dp = par.dp_exposed_s(x, lmc.device_s(t.last_backward, eff), eff.overlap)
    opt = lmc.device_s(t.optimizer, eff) + eff.step_s
    return compute, tp, bubble, p2p, dp, opt, compute + tp + bubble + p2p + dp + opt


def zero3_exposed_s(t: Terms, exchange_s: float, eff: lm_fit.Efficiency) -> float:
    """ZeRO-3's (FSDP FULL_SHARD's) exchange of one micro-batch not hidden by compute,
    block by block (:func:`scalelab.theory.zero.fsdp_blocks_exposed_s`): each block's
    all-gather behind the block before's forward, and in backward the next block's
    all-gather and its own reduce-scatter behind its backward (PyTorch FSDP's
    ``forward_prefetch`` / ``BackwardPrefetch``)."""
    ag = exchange_s * t.dp_gather_share
    return zero.fsdp_blocks_exposed_s(
        max(1, t.layers), eff.overlap * t.layers * lmc.device_s(t.layer_forward, eff),
        eff.overlap * t.layers * lmc.device_s(t.layer_backward, eff), ag, exchange_s - ag)


def lm_step(model: TransformerConfig, layout: ParallelLayout, seq_len: int,
            target: LMTarget, *, stack: str = "pytorch") -> LMStep:
    """The step of ``layout`` training ``model`` at ``seq_len`` on ``target`` (module
    docstring). ``stack``: which fitted framework (:data:`STACKS`)."""
    lay, cfg = layout, model
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
    lay.check_model(cfg)
    if lay.gpus > target.gpus:
        raise ValueError(f"{lay.describe()} needs {lay.gpus} GPUs; the target has "
                         f"{target.gpus}")
    eff, band, fit_note = _fit(stack, target.device)
    compute_s, tp_s, bubble, p2p, dp_s, opt_s, step_s = step_seconds(
        terms(cfg, lay, seq_len, target, stack), eff)
    tokens_per_s = lay.global_batch * seq_len / step_s
    peak, model_f, hw_f, notes = _constants(cfg, seq_len, lay.recompute, lay.precision,
                                            target.device, fit_note)
    mem = lmm.memory_per_gpu(cfg, lay, seq_len)
    total = mem.total
    return LMStep(cfg, lay, seq_len, compute_s, tp_s, bubble, p2p, dp_s, step_s,
                  tokens_per_s, tokens_per_s * model_f / (lay.gpus * peak),
                  tokens_per_s * hw_f / (lay.gpus * peak), total, mem.to_dict(),
                  total <= target.memory_bytes * target.memory_margin, band, notes, opt_s,
                  stack)


@lru_cache(maxsize=4096)
def _constants(cfg, seq_len: int, recompute: str, precision: str, device: str,
               fit_note: str) -> tuple[float, float, float, tuple[str, ...]]:
    """(dense peak, model FLOPs per token, hardware FLOPs per token, notes), cached."""
    peak = lmc.peak_flops(device, precision)
    model_f, hw_f = _flops(cfg, seq_len, recompute)
    notes = (f"MFU: 6N + 12 L h s = {model_f:.4g} FLOPs per token (N without the "
             f"embedding, PaLM's and torchtitan's count) over the {device}'s dense "
             f"{precision} peak {peak / 1e12:g} TFLOP/s",
             fit_note,
             f"memory: model state at {lmm.state_scheme(precision)} bytes per parameter, "
             f"Korthikanti et al. 2022 activations x {recompute} recomputation")
    return peak, model_f, hw_f, notes


@lru_cache(maxsize=4096)
def _flops(cfg, seq_len: int, recompute: str) -> tuple[float, float]:
    n = cfg.non_embedding_params()
    return (lm_theory.flops_per_token(n, cfg.layers, cfg.hidden, seq_len),
            lm_theory.hfu_flops_per_token(n, cfg.layers, cfg.hidden, seq_len, recompute))
