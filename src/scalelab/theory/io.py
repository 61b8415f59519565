"""Input pipeline: how much loading time shows, how many loader processes hide it, and
whether a node's CPU cores can feed all of its devices.

Per device. Each of ``L`` loader processes prepares whole minibatches, one at a time,
taking ``t_load`` seconds each, while the device computes a step of ``T_C`` seconds. In
steady state the loaders together deliver one minibatch every ``t_load / L`` seconds; the
device consumes one every ``T_C``. Whatever the loaders are slower than the device shows as
waiting time per step (the paper's "mask I/O with compute"). Assumes enough prefetch depth
that bursts even out, and that loaders do not slow the compute (each on a core of its own).

Per node. A node has ``G`` devices and ``C`` CPU cores free for decoding (the cores its
training processes do not keep busy). Decoding one sample takes ``t_s`` seconds on one core,
so one minibatch takes ``t_load = b * t_s`` on one core.

1. Loader processes per device: ``L = ceil(t_load / T_C)`` (from ``t_load / L <= T_C``).
2. Processes, each wanting a core, for the node: ``G * L``: the cores the node needs.
3. With ``C < G * L`` the ``G * L`` processes share ``C`` cores evenly, so each device's
   loaders together run on ``C / G`` cores. The loaders of one device cannot use more cores
   than they have processes, so they deliver a minibatch every
   ``t_load / min(L, C / G)`` seconds; when the cores are short that is
   ``b * t_s * G / C``, the time ``C / G`` cores take to decode ``b`` samples.
4. Exposed input time per step: ``T_IO = max(0, t_load / min(L, C / G) - T_C)``; the step
   takes ``T_C + T_IO = max(T_C, t_load / min(L, C / G))``.
5. The throughput it caps: ``G b / (T_C + T_IO)`` (weak scaling, :mod:`amdahl`). When the
   input binds this is ``C / t_s``, all the node's cores decoding, however fast the devices.
6. The fix: ``G * L`` cores. With time slicing ideal, ``ceil(G * t_load / T_C)`` cores would
   do (fewer than ``G * L`` when ``t_load / T_C`` is not a whole number); whole processes
   per device on cores of their own is what a DataLoader per device runs, so ``G * L`` is
   the figure to provision.

Assumes decode time scales linearly with the samples and the cores (no memory-bandwidth or
storage limit), and that loaders on a core are the only work it does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalelab.theory.amdahl import weak_step_s, weak_throughput


def exposed_io_s(load_s_per_batch: float, loader_workers: int, compute_s: float) -> float:
    """Input time per step not hidden behind compute: ``max(0, t_load / L - T_C)``.

    With ``L = 0`` the main process loads each batch before computing it, so nothing is
    hidden and the whole ``t_load`` shows.
    """
    if load_s_per_batch < 0 or compute_s < 0 or loader_workers < 0:
        raise ValueError(
            f"need load_s_per_batch >= 0, compute_s >= 0, loader_workers >= 0; got "
            f"{load_s_per_batch}, {compute_s}, {loader_workers}"
        )
    if loader_workers == 0:
        return float(load_s_per_batch)
    return max(0.0, load_s_per_batch / loader_workers - compute_s)


def loader_workers_needed(load_s_per_batch: float, compute_s: float) -> int:
    """Fewest loader processes that hide loading: ``ceil(t_load / T_C)``.

    From ``t_load / L <= T_C``. Zero loading time needs no loader process; otherwise at
    least one (so loading runs beside compute, not before it).
    """
    if load_s_per_batch < 0 or compute_s <= 0:
        raise ValueError(
            f"need load_s_per_batch >= 0 and compute_s > 0; got {load_s_per_batch}, {compute_s}"
        )
    if load_s_per_batch == 0:
        return 0
    return max(1, math.ceil(load_s_per_batch / compute_s - 1e-9))


def node_cores_needed(gpus_per_node: int, loaders_per_gpu: int) -> int:
    """Cores a node needs so every loader process has one: ``G * L`` (step 2 above)."""
    if gpus_per_node < 1 or loaders_per_gpu < 0:
        raise ValueError(f"need gpus_per_node >= 1 and loaders_per_gpu >= 0; got "
                         f"{gpus_per_node}, {loaders_per_gpu}")
    return gpus_per_node * loaders_per_gpu


def node_exposed_io_s(load_s_per_batch: float, loader_workers: int, compute_s: float,
                      gpus_per_node: int, cpu_cores: float | None) -> float:
    """Exposed input time per step on a node: ``max(0, t_load / min(L, C / G) - T_C)``.

    Step 3-4 above. ``cpu_cores=None`` (unknown) assumes every loader has a core, which is
    :func:`exposed_io_s`. ``L = 0`` loads in the training process: all of ``t_load`` shows.
    """
    if gpus_per_node < 1:
        raise ValueError(f"need gpus_per_node >= 1, got {gpus_per_node}")
    if cpu_cores is not None and cpu_cores <= 0:
        raise ValueError(f"need cpu_cores > 0, got {cpu_cores}")
    if loader_workers == 0 or cpu_cores is None:
        return exposed_io_s(load_s_per_batch, loader_workers, compute_s)
    effective = min(float(loader_workers), cpu_cores / gpus_per_node)
    return exposed_io_s(load_s_per_batch / effective, 1, compute_s)


@dataclass(frozen=True)
class NodeInput:
    """A node's input pipeline at one per-device batch: what it needs and what it gets.

    ``cpu_cores`` is None when the node's core count is unknown; then ``input_bound`` is
    None and ``exposed_io_s`` assumes every loader process has a core.
    """

    gpus_per_node: int
    batch_size: int
    compute_s: float
    load_s_per_sample: float
    cpu_cores: int | None
    load_s_per_batch: float
    loaders_per_gpu: int
    cores_needed: int
    exposed_io_s: float
    step_s: float
    samples_per_s: float
    samples_per_s_compute: float
    input_bound: bool | None

    def __post_init__(self):
        if self.exposed_io_s < 0 or self.step_s < self.compute_s:
            raise ValueError(f"inconsistent node input: exposed {self.exposed_io_s} s, step "
                             f"{self.step_s} s < compute {self.compute_s} s")
        if self.cpu_cores is not None and self.cpu_cores < 1:
            raise ValueError(f"cpu_cores must be >= 1, got {self.cpu_cores}")


def node_input(load_s_per_sample: float, batch_size: int, compute_s: float,
               gpus_per_node: int, cpu_cores: int | None = None,
               loaders_per_gpu: int | None = None) -> NodeInput:
    """Steps 1-6 above for ``G`` devices at batch ``b`` on a node of ``C`` cores.

    ``loaders_per_gpu`` defaults to the recommendation ``ceil(b * t_s / T_C)``.
    """
    if load_s_per_sample < 0 or batch_size < 1 or compute_s <= 0:
        raise ValueError(f"need load_s_per_sample >= 0, batch_size >= 1, compute_s > 0; got "
                         f"{load_s_per_sample}, {batch_size}, {compute_s}")
    load_s = batch_size * load_s_per_sample
    loaders = loader_workers_needed(load_s, compute_s) if loaders_per_gpu is None \
        else loaders_per_gpu
    exposed = node_exposed_io_s(load_s, loaders, compute_s, gpus_per_node, cpu_cores)
    step_s = weak_step_s(compute_s, exposed)
    return NodeInput(
        gpus_per_node=gpus_per_node, batch_size=batch_size, compute_s=compute_s,
        load_s_per_sample=load_s_per_sample, cpu_cores=cpu_cores, load_s_per_batch=load_s,
        loaders_per_gpu=loaders, cores_needed=node_cores_needed(gpus_per_node, loaders),
        exposed_io_s=exposed, step_s=step_s,
        samples_per_s=weak_throughput(gpus_per_node, batch_size, step_s),
        samples_per_s_compute=weak_throughput(gpus_per_node, batch_size, compute_s),
        input_bound=None if cpu_cores is None else exposed > 0)


def shared_cores_step_s(step_s: float, compute_cpu_s: float, load_s_per_batch: float,
                        loader_workers: int, cores: float) -> float:
    """Step time of a worker whose loader processes share its host's cores with its compute.

    On a host where the training processes themselves run on the CPU, a worker and its
    ``L`` loaders have ``c`` cores between them (the host's cores over its workers). A
    worker's core is busy only while it computes (``compute_cpu_s`` of CPU time per step);
    while it waits for the exchange the core is free, and the loaders decode then. In
    steady state the step ``T`` is bounded three ways:

    1. by its own critical path with the batch ready, ``T0 = step_s`` (compute + exchange);
    2. by the loaders' delivery: ``L`` processes on at most ``c`` cores deliver one batch
       every ``t_load / min(L, c)`` seconds;
    3. by the cores' capacity: the CPU work of one step, ``compute_cpu_s + t_load``, must fit
       in ``c T`` seconds of core time.

    ``T = max(T0, t_load / min(L, c), (compute_cpu_s + t_load) / c)``, the step of ideal
    time slicing (no cost for switching, every process runnable whenever it has work).
    With ``L = 0`` the worker decodes before it computes: ``T = T0 + t_load``. With a core
    free for every loader (``c >= threads + L``, ``compute_cpu_s = threads T_C``) bound 3
    is a weighted mean of ``T_C`` and ``t_load / L`` and never binds; without an exchange
    (``T0 = T_C``) the step is then ``max(T_C, t_load / L)``, that of :func:`exposed_io_s`.
    """
    if min(step_s, compute_cpu_s, load_s_per_batch) < 0 or loader_workers < 0 or cores <= 0:
        raise ValueError(
            f"need step_s, compute_cpu_s, load_s_per_batch >= 0, loader_workers >= 0 and "
            f"cores > 0; got {step_s}, {compute_cpu_s}, {load_s_per_batch}, "
            f"{loader_workers}, {cores}")
    if loader_workers == 0:
        return step_s + load_s_per_batch
    return max(step_s, load_s_per_batch / min(float(loader_workers), cores),
               (compute_cpu_s + load_s_per_batch) / cores)
