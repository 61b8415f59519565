"""Sharded data parallelism (ZeRO, FSDP): model state per device and the exchange per step.

Symbols: ``Psi`` parameters (``params``), ``N`` data-parallel ranks (``ranks``), and bytes
per parameter of each part of the model state: ``p`` the parameters as the step uses
them, ``g`` the gradients, ``K`` the optimizer state (``optimizer_bytes_per_param``; with
mixed-precision Adam K = 12: an fp32 master copy, momentum and variance, 4 + 4 + 4).

Layouts (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", SC 2020, arXiv:1910.02054, section 5 and Table 1):

- ``ddp`` plain data parallelism, every rank holds everything:
  ``(p + g + K) Psi``
- ``zero1`` optimizer state partitioned (P_os): ``(p + g) Psi + K Psi / N``
- ``zero2`` gradients too (P_os+g): ``p Psi + (g + K) Psi / N``
- ``zero3`` parameters too (P_os+g+p, FSDP's full shard): ``(p + g + K) Psi / N``

With the paper's p = g = 2 (fp16) and K = 12 these are its ``(2 + 2 + K) Psi``,
``4 Psi + K Psi / N``, ``2 Psi + (2 + K) Psi / N`` and ``(2 + 2 + K) Psi / N``; for
Psi = 7.5e9, N = 64 they give 120 GB, 31.4 GB, 16.6 GB and 1.88 GB (the paper's Table 1).

These are the states the paper counts: the most a rank holds of each part during a step.
On top, a sharded layout holds what it gathers (:func:`transient_bytes`): ZeRO-3 (FSDP2
``reshard_after_forward=True``) one unit's full parameters at a time (two with prefetch
of the next unit), and ZeRO-2/3 a unit's full gradient until it is reduce-scattered.
ZeRO-2 as FSDP2 runs it (``reshard_after_forward=False``) keeps every unit's full
parameters from its forward to the end of its backward, the ``p Psi`` above, and frees
them after backward: between steps its ranks hold ZeRO-3's state
(:func:`rank_state_bytes`, ``between_steps=True``).

Exchange per rank per step (each rank's link, bytes sent = bytes received), from the
ring collectives over N ranks, each moving ``(N-1)/N`` of the tensor per rank:

- ``ddp``: all-reduce of the gradients: ``2 (N-1)/N g Psi``
- ``zero1``, ``zero2``: reduce-scatter of the gradients (each rank keeps the sum of its
  shard) then all-gather of the updated parameters: ``(N-1)/N (g + p) Psi``, the
  all-reduce's bytes when g = p (the paper's section 7.2.1)
- ``zero3``: all-gather of the parameters in forward and again in backward (they were
  freed after forward), reduce-scatter of the gradients: ``(N-1)/N (2 p + g) Psi``,
  1.5x the all-reduce's bytes when g = p (section 7.2.2)

Exact shards. FSDP2 shards every tensor on its first dimension the way ``torch.chunk``
does: ``c = ceil(d0 / N)`` rows per rank, rank r holds rows ``[r c, min((r+1) c, d0))``,
so the last ranks can hold fewer (or none). :func:`dim0_shard_numel` gives the exact
elements a rank holds; ``Psi / N`` is its even approximation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

LAYOUTS = ("ddp", "zero1", "zero2", "zero3")
LAYOUT_NAMES = {
    "ddp": "plain data parallelism (every rank holds parameters, gradients, optimizer state)",
    "zero1": "ZeRO-1: optimizer state sharded",
    "zero2": "ZeRO-2: optimizer state and gradients sharded",
    "zero3": "ZeRO-3 / FSDP full shard: parameters, gradients and optimizer state sharded",
}
#: Bytes of optimizer state per parameter: SGD without momentum 0, SGD with momentum 4
#: (an fp32 buffer), Adam 8 (two fp32 moments); with mixed precision add 4 for the fp32
#: master copy of the parameters (the ZeRO paper's K = 12 for Adam).
OPTIMIZER_BYTES_PER_PARAM = {"sgd": 0, "sgd_momentum": 4, "adam": 8}


def optimizer_state_bytes(optimizer: str, param_bytes: float, momentum: float = 0.9) -> float:
    """Optimizer state of scalelab's optimizers for ``param_bytes`` of parameters: the
    state is kept in the parameters' dtype, :data:`OPTIMIZER_BYTES_PER_PARAM`'s fp32 bytes
    over 4 per byte of parameter (Adam 2x, SGD with momentum 1x, plain SGD none)."""
    key = "adam" if optimizer == "adam" else ("sgd_momentum" if momentum else "sgd")
    return OPTIMIZER_BYTES_PER_PARAM[key] / 4 * param_bytes


def zero3_min_ranks(state_bytes: float, memory_bytes: float, other_bytes: float = 0.0
                    ) -> int | None:
    """Fewest ranks on which ZeRO-3 holds ``state_bytes`` of model state in
    ``memory_bytes`` each beside ``other_bytes`` (activations): ``state / N + other <= M``,
    so ``N = ceil(state / (M - other))``; None when ``other`` alone fills the memory."""
    room = memory_bytes - other_bytes
    if not room > 0:
        return None
    return max(1, math.ceil(state_bytes / room))


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (one of {', '.join(LAYOUTS)})")
    return layout


def _check(params: float, ranks: int) -> None:
    if params < 0:
        raise ValueError(f"parameters must be >= 0, got {params}")
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")


@dataclass(frozen=True)
class ModelState:
    """Bytes of model state one rank holds between steps, by component."""

    layout: str
    ranks: int
    param_bytes: float
    grad_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes


def model_state(params: float, ranks: int, layout: str, *, param_bytes_per_param: float = 2,
                grad_bytes_per_param: float = 2,
                optimizer_bytes_per_param: float = 12) -> ModelState:
    """Model state per rank for ``layout`` (module docstring: the four formulas).

    Defaults are the ZeRO paper's mixed-precision Adam (p = g = 2, K = 12).
    """
    _check(params, ranks)
    check_layout(layout)
    n = ranks
    p = param_bytes_per_param * params
    g = grad_bytes_per_param * params
    k = optimizer_bytes_per_param * params
    shard = {"ddp": (False, False, False), "zero1": (False, False, True),
             "zero2": (False, True, True), "zero3": (True, True, True)}[layout]
    p, g, k = (x / n if s else x for x, s in zip((p, g, k), shard))
    return ModelState(layout, ranks, p, g, k)


def exchange_bytes(params: float, ranks: int, layout: str, *, param_bytes_per_param: float = 2,
                   grad_bytes_per_param: float = 2) -> float:
    """Bytes each rank sends (and receives) per step (module docstring: the exchange)."""
    _check(params, ranks)
    check_layout(layout)
    if ranks == 1:
        return 0.0
    frac = (ranks - 1) / ranks
    p = param_bytes_per_param * params
    g = grad_bytes_per_param * params
    if layout == "ddp":
        return 2.0 * frac * g
    if layout in ("zero1", "zero2"):
        return frac * (g + p)
    return frac * (2.0 * p + g)


def zero1_over_ddp_bytes(params: float, ranks: int, *, param_bytes_per_param: float = 2,
                         grad_bytes_per_param: float = 2) -> float:
    """Bytes per rank of ZeRO-1 as torch's ``ZeroRedundancyOptimizer`` over DDP runs it.

    DDP still all-reduces the full gradients (``2 (N-1)/N g Psi``); each rank then updates
    the parameters it owns and broadcasts them, so a rank receives the other ranks' share,
    ``(N-1)/N p Psi`` on average: ``(N-1)/N (2 g + p) Psi``, 1.5x the ideal ZeRO-1 exchange
    of :func:`exchange_bytes` (which reduce-scatters instead of all-reducing).
    """
    _check(params, ranks)
    if ranks == 1:
        return 0.0
    frac = (ranks - 1) / ranks
    return frac * (2.0 * grad_bytes_per_param + param_bytes_per_param) * params


def exchange_s(params: float, ranks: int, layout: str, bandwidth_Bps: float,
               latency_s: float = 0.0, *, param_bytes_per_param: float = 2,
               grad_bytes_per_param: float = 2, units: int = 1) -> float:
    """Ring time of the exchange: bytes / B + (N-1) latency per collective.

    Each ring collective takes N-1 steps; all-reduce is two collectives, ZeRO-1/2 two
    (reduce-scatter, all-gather) and ZeRO-3 three, each issued once per FSDP unit
    (``units``; DDP's buckets are charged as one collective pair, as in
    :func:`scalelab.theory.comm.ring_allreduce_s`).
    """
    if not bandwidth_Bps > 0:
        raise ValueError(f"bandwidth_Bps must be > 0, got {bandwidth_Bps}")
    if ranks <= 1:
        return 0.0
    nbytes = exchange_bytes(params, ranks, layout, param_bytes_per_param=param_bytes_per_param,
                            grad_bytes_per_param=grad_bytes_per_param)
    collectives = 3 if layout == "zero3" else 2
    per = units if layout != "ddp" else 1
    return nbytes / bandwidth_Bps + collectives * per * (ranks - 1) * latency_s


def transient_bytes(unit_params: Sequence[float], ranks: int, layout: str, *,
                    param_bytes_per_param: float = 2, grad_bytes_per_param: float = 2,
                    prefetch: bool = True) -> float:
    """Extra bytes a sharded layout holds inside a step on top of :func:`model_state`.

    ``unit_params``: parameters of each FSDP unit (one per block). ZeRO-2 and ZeRO-3: the
    largest unit's full gradient before its reduce-scatter, less the rank's shard of it
    (already in the state); ZeRO-3 also the gathered parameters of the largest unit (two
    units with prefetch of the next); ZeRO-1 and plain DDP none (the full parameters and
    gradients are already in the state).
    """
    check_layout(layout)
    if layout in ("ddp", "zero1") or ranks == 1 or not unit_params:
        return 0.0
    largest = sorted(unit_params, reverse=True)
    grad = grad_bytes_per_param * largest[0] * (ranks - 1) / ranks
    if layout == "zero2":
        return grad
    gathered = sum(largest[:2] if prefetch else largest[:1])
    return param_bytes_per_param * gathered + grad


def dim0_shard_numel(shape: Sequence[int], ranks: int, rank: int) -> int:
    """Elements of a tensor of ``shape`` that ``rank`` holds when sharded on dim 0.

    ``torch.chunk`` semantics, as FSDP2's ``Shard(0)``: ``c = ceil(d0 / N)`` rows per rank,
    rank r holds ``max(0, min(d0, (r+1) c) - r c)`` rows. A 0-d tensor counts as one row.
    """
    if ranks < 1 or not 0 <= rank < ranks:
        raise ValueError(f"rank {rank} out of range for {ranks} ranks")
    dims = list(shape) or [1]
    d0 = dims[0]
    rest = math.prod(dims[1:])
    c = math.ceil(d0 / ranks) if d0 else 0
    rows = max(0, min(d0, (rank + 1) * c) - rank * c)
    return rows * rest


def sharded_numel(shapes: Iterable[Sequence[int]], ranks: int, rank: int) -> int:
    """Elements ``rank`` holds of all ``shapes``, each sharded on its first dimension."""
    return sum(dim0_shard_numel(s, ranks, rank) for s in shapes)


def rank_state_bytes(shapes: Sequence[Sequence[int]], ranks: int, rank: int, layout: str, *,
                     param_bytes_per_param: float = 4, grad_bytes_per_param: float = 4,
                     optimizer_bytes_per_param: float = 4,
                     between_steps: bool = True) -> ModelState:
    """Exactly what ``rank`` holds of tensors of ``shapes``, as torch's engines place them.

    - sharded parts of ZeRO-2/3 (FSDP2): each tensor's dim-0 shard (:func:`sharded_numel`);
      ZeRO-2's parameters are whole inside the step and sharded ``between_steps``;
    - ZeRO-1 (``ZeroRedundancyOptimizer``): whole tensors' optimizer state, placed
      largest first on the least-loaded rank
      (:func:`scalelab.theory.sharding.greedy_whole_tensor`, its documented algorithm);
    - plain DDP: everything.

    Defaults: fp32 parameters and gradients, SGD with momentum (K = 4).
    """
    from scalelab.theory.sharding import greedy_whole_tensor

    check_layout(layout)
    numels = [math.prod(s) for s in shapes]
    total = sum(numels)
    mine = sharded_numel(shapes, ranks, rank)
    if layout == "ddp":
        p = g = k = total
    elif layout == "zero1":
        p = g = total
        k = greedy_whole_tensor(numels, ranks)[rank]
    elif layout == "zero2":
        p, g, k = (mine if between_steps else total), mine, mine
    else:
        p = g = k = mine
    return ModelState(layout, ranks, p * param_bytes_per_param, g * grad_bytes_per_param,
                      k * optimizer_bytes_per_param)


def fsdp_step_s(unit_fractions: Sequence[float], forward_s: float, backward_s: float,
                allgather_s: float, reducescatter_s: float,
                reshard_after_forward: bool = True) -> float:
    """Forward + backward of FSDP2 units with the exchange overlapped by prefetch, seconds.

    Units i = 0..n-1 hold fractions ``u_i`` of the parameters; each unit's compute and its
    collectives are taken in proportion: forward ``u_i F``, backward ``u_i B``, all-gather
    ``u_i A``, reduce-scatter ``u_i R`` (``allgather_s`` = A and ``reducescatter_s`` = R are
    the whole model's, one collective each). One link carries the collectives one at a
    time, in issue order; FSDP2 prefetches one unit ahead:

    - forward: unit i's all-gather starts once the link is free and unit i-1's forward has
      begun (one unit ahead); its forward starts once its parameters and unit i-1's forward
      are done;
    - backward, units in reverse: with ``reshard_after_forward`` (ZeRO-3) every unit is
      gathered again, the last one once forward is done and each other one when the
      backward of the unit after it begins (one ahead); ZeRO-2 keeps them. A unit's
      backward starts when its parameters and the following unit's backward are done; its
      gradient's reduce-scatter goes on the link once its backward is done.

    The step ends with the last reduce-scatter. Exposed exchange = result - (F + B); with
    no exchange the result is F + B, with no compute it is the whole exchange.
    """
    total = sum(unit_fractions)
    if not total > 0:
        raise ValueError("need at least one unit with parameters")
    if min(forward_s, backward_s, allgather_s, reducescatter_s) < 0:
        raise ValueError("times must be >= 0")
    u = [f / total for f in unit_fractions]
    n = len(u)
    link = 0.0
    compute_start = compute_end = 0.0
    for i in range(n):  # forward
        ag_end = max(link, compute_start if i else 0.0) + u[i] * allgather_s
        link = ag_end
        compute_start = max(ag_end, compute_end)
        compute_end = compute_start + u[i] * forward_s
    b_end = compute_end
    ag_ready = [0.0] * n
    if reshard_after_forward:  # the last unit is gathered again once forward is done
        link = max(link, compute_end) + u[n - 1] * allgather_s
        ag_ready[n - 1] = link
    for i in reversed(range(n)):
        b_start = max(b_end, ag_ready[i])
        if reshard_after_forward and i > 0:  # prefetch the next unit of backward
            link = max(link, b_start) + u[i - 1] * allgather_s
            ag_ready[i - 1] = link
        b_end = b_start + u[i] * backward_s
        link = max(link, b_end) + u[i] * reducescatter_s  # this unit's gradient
    return max(link, b_end)


def fsdp_blocks_exposed_s(blocks: int, forward_s: float, backward_s: float,
                          allgather_s: float, reducescatter_s: float) -> float:
    """The steady state of :func:`fsdp_step_s` for ``blocks`` equal units under ZeRO-3:
    the exchange one forward + backward leaves exposed, seconds, without the first unit's
    gather and the last one's reduce-scatter, which no compute can hide.

    With prefetch one unit ahead, a unit's forward waits for its all-gather and its
    backward for the next unit's all-gather plus its own reduce-scatter on the same link, so
    per unit of ``F/n``, ``B/n``, ``A/n``, ``R/n``:

        exposed = n (max(0, A/n - F/n) + max(0, (A + R)/n - B/n))

    A unit whose collectives outlast its compute leaves the difference exposed even when
    the whole exchange is shorter than the whole compute (Zhao et al. 2023, "PyTorch
    FSDP", sec. 4.3 and 5). Closed form, for a step model called once per layout;
    :func:`fsdp_step_s` is the simulation it is the steady state of (within
    ``3 (A + R) / n``: the ends).
    """
    if blocks < 1:
        raise ValueError(f"blocks must be >= 1, got {blocks}")
    if min(forward_s, backward_s, allgather_s, reducescatter_s) < 0:
        raise ValueError("times must be >= 0")
    n = blocks
    return n * (max(0.0, (allgather_s - forward_s) / n)
                + max(0.0, (allgather_s + reducescatter_s - backward_s) / n))


def exchange_factor(layout: str, *, param_bytes_per_param: float = 2,
                    grad_bytes_per_param: float = 2) -> float:
    """A layout's exchange bytes over plain DDP's all-reduce at the same scale.

    From :func:`exchange_bytes`, the ``(N-1)/N Psi`` cancels: ZeRO-1 and ZeRO-2
    ``(g + p) / (2 g)``, 1 when p = g; ZeRO-3 ``(2 p + g) / (2 g)``, 1.5 when p = g.
    """
    check_layout(layout)
    p, g = param_bytes_per_param, grad_bytes_per_param
    if not g > 0:
        raise ValueError(f"gradient bytes per parameter must be > 0, got {g}")
    return {"ddp": 1.0, "zero1": (g + p) / (2 * g), "zero2": (g + p) / (2 * g),
            "zero3": (2 * p + g) / (2 * g)}[layout]


def zero1_broadcast_s(params: float, ranks: int, bandwidth_Bps: float, latency_s: float = 0.0,
                      *, param_bytes_per_param: float = 2) -> float:
    """ZeRO-1's broadcast of the updated parameters from their owners, seconds.

    ``ZeroRedundancyOptimizer`` broadcasts every tensor from the rank that owns it, one
    after another, after the optimizer step. A broadcast of S bytes takes S / B whatever
    the number of ranks (pipelined along a ring or a tree every link carries the whole
    tensor once; nccl-tests count a broadcast's bus bandwidth as its algorithm bandwidth),
    so all of them take ``p Psi / B + (N-1) latency``, not the ``(N-1)/N p Psi`` a rank
    receives. Measured: two CPU ranks on Gloo, 7.0 MB of fp32 parameters over a 300 Mbit/s
    emulated link (36.0 MB/s measured): the optimizer phase with the broadcasts 191.7 ms
    against DDP's 1.6 ms, 190 ms where 7.0 MB / 36.0 MB/s is 194 ms.
    """
    _check(params, ranks)
    if ranks == 1:
        return 0.0
    if not bandwidth_Bps > 0:
        raise ValueError(f"bandwidth_Bps must be > 0, got {bandwidth_Bps}")
    return param_bytes_per_param * params / bandwidth_Bps + (ranks - 1) * latency_s


def layout_exposed_s(layout: str, ddp_exposed_s: float, ddp_allreduce_s: float, *,
                     ranks: int, param_bytes_per_param: float = 4,
                     grad_bytes_per_param: float = 4) -> float:
    """Exchange a layout leaves after compute, from plain DDP's at the same scale, seconds.

    ``ddp_allreduce_s`` (C) is DDP's all-reduce time on ``ranks`` ranks and
    ``ddp_exposed_s`` (E) what of it shows after backward on the same links. As the runner
    runs each layout:

    - ``ddp``: E.
    - ``zero1`` (``ZeroRedundancyOptimizer`` over DDP): DDP's all-reduce, E exposed as
      before, then the owners' broadcasts after the optimizer step, with no compute left to
      hide behind (:func:`zero1_broadcast_s`): ``p Psi / B`` against the all-reduce's
      ``2 (N-1)/N g Psi / B``, so ``E + p N / (2 g (N-1)) C``.
    - ``zero2``, ``zero3`` (FSDP2): the exchange is :func:`exchange_factor` f times DDP's
      bytes, issued per unit and overlapped with compute by prefetch, taken to hide as
      DDP's buckets do: ``f E`` (f = 1 and 1.5 when p = g). An assumption for GPUs, where
      the collectives run on their own stream; :func:`fsdp_step_s` is the finer per-unit
      model. On CPU ranks over Gloo nothing overlaps and Gloo's reduce-scatter costs an
      all-reduce (measured: :mod:`scalelab.theory.sharded_step`).
    """
    check_layout(layout)
    if min(ddp_exposed_s, ddp_allreduce_s) < 0:
        raise ValueError("times must be >= 0")
    kw = dict(param_bytes_per_param=param_bytes_per_param,
              grad_bytes_per_param=grad_bytes_per_param)
    if layout == "ddp":
        return ddp_exposed_s
    if layout == "zero1":
        if ranks <= 1:
            return ddp_exposed_s
        ratio = param_bytes_per_param * ranks / (2 * grad_bytes_per_param * (ranks - 1))
        return ddp_exposed_s + ratio * ddp_allreduce_s
    return exchange_factor(layout, **kw) * ddp_exposed_s


def accumulation_grad_bytes(params: float, ranks: int, layout: str, accumulation_steps: int,
                            *, grad_bytes_per_param: float = 2) -> float:
    """Extra gradient bytes a sharded rank holds while it accumulates micro-batches.

    FSDP2 accumulates without exchanging (``set_requires_gradient_sync(False)``, as
    ``scalelab run --accumulation-steps`` does, one reduce-scatter per step) by keeping
    each unit's gradient whole and unreduced until the last micro-batch's backward: ZeRO-2
    and ZeRO-3 then hold ``g Psi`` of gradients, not ``g Psi / N``, so
    ``g Psi (N - 1) / N`` more than :func:`model_state` says. Plain DDP and ZeRO-1 hold
    whole gradients anyway (0). One micro-batch per step: 0.
    """
    check_layout(layout)
    _check(params, ranks)
    if accumulation_steps < 1:
        raise ValueError(f"accumulation steps must be >= 1, got {accumulation_steps}")
    if accumulation_steps == 1 or layout in ("ddp", "zero1") or ranks == 1:
        return 0.0
    return grad_bytes_per_param * params * (ranks - 1) / ranks
