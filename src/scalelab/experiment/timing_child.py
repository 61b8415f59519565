"""One step-timing process of :mod:`scalelab.experiment.measure`.

``python -m scalelab.experiment.timing_child --time-steps SPEC_JSON BATCH THREADS STEPS
SEED`` (or ``--time-fed-steps`` / ``--time-ddp-steps``, see :func:`child_main`): builds the
model, warms it up, prints ``ready``, waits for a line on its standard input so that every
process of a timing starts together, times its steps with
:func:`scalelab.profiler.time_steps` and prints them as one JSON line. ``SPEC_JSON`` is the
workload with its computation configuration (``algorithm``), as
:func:`scalelab.experiment.measure.time_concurrently` writes it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from scalelab.workload import WorkloadSpec

SETTLE_STEPS = 2
"""Fed steps left untimed after the go line (the loaders' queues filling)."""


def _spec_of(spec_json: str) -> tuple[WorkloadSpec, str]:
    d = json.loads(spec_json)
    algorithm = d.pop("algorithm", "default")
    return WorkloadSpec.from_dict(d), algorithm


def _time_steps_child(spec_json: str, batch_size: int, threads: int, steps: int,
                      seed: int) -> None:
    import torch

    torch.set_num_threads(threads)
    spec, algorithm = _spec_of(spec_json)
    _time_when_told(spec, spec.build_model(seed=seed), batch_size, threads, steps, seed,
                    algorithm=algorithm)


def _time_when_told(spec: WorkloadSpec, model, batch_size: int, threads: int, steps: int,
                    seed: int, batches=None, settle: int = 1, algorithm: str = "default",
                    **extra) -> None:
    """Warm ``model`` up, say ``ready``, wait for the go line, then time ``steps`` steps
    after ``settle`` untimed ones with :func:`scalelab.profiler.time_steps` (on ``batches``
    when given) and print them, with ``extra``, as one JSON line."""
    from scalelab.profiler import time_steps

    time_steps(spec, model, batch_size, algorithm=algorithm, warmup=1, steps=1, seed=seed,
               batches=batches)
    print("ready", flush=True)
    sys.stdin.readline()
    t = time_steps(spec, model, batch_size, algorithm=algorithm, warmup=settle, steps=steps,
                   seed=seed, batches=batches)
    print(json.dumps({**asdict(t), "threads": threads, **extra}), flush=True)


def _time_fed_steps_child(spec_json: str, batch_size: int, threads: int, steps: int,
                          seed: int, data: str, loader_workers: int, workers: int,
                          worker: int) -> None:
    import itertools

    import torch

    from scalelab.runner.data import ImageFolderShards
    from scalelab.runner.loader import LoaderShards

    torch.set_num_threads(threads)
    spec, algorithm = _spec_of(spec_json)
    shards = ImageFolderShards(spec, data, seed, workers, batch_size)
    index = itertools.count()
    # two steps before the go line (the loaders start and deliver), the settling ones, the
    # timed ones
    with LoaderShards(shards, worker, 2 + SETTLE_STEPS + steps, loader_workers) as feed:
        _time_when_told(spec, spec.build_model(seed=seed), batch_size, threads, steps, seed,
                        batches=lambda: feed.shard(next(index), worker), settle=SETTLE_STEPS,
                        algorithm=algorithm, loader_workers=loader_workers)


def _time_ddp_steps_child(spec_json: str, batch_size: int, threads: int, steps: int,
                          seed: int, port: int, workers: int, rank: int, ddp: int) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=workers, timeout=timedelta(seconds=120))
    try:
        spec, algorithm = _spec_of(spec_json)
        model, batches = spec.build_model(seed=seed), None
        if ddp:  # as the runner's DDP workers: gradients are views of the buckets, and the
            # model is in its memory format before DDP sees it
            from scalelab.runner.compute import Computation

            model = DistributedDataParallel(Computation(algorithm, "cpu").model(model),
                                            gradient_as_bucket_view=True)
        else:
            x, y = spec.synthetic_batch(batch_size, seed=seed)

            def batches():
                dist.barrier()
                return x, y
        _time_when_told(spec, model, batch_size, threads, steps, seed, batches=batches,
                        algorithm=algorithm)
        # every rank done with its collectives before any closes its connections: a rank
        # that tears down first can abort the other's transport thread at exit
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _time_fsdp_steps_child(spec_json: str, batch_size: int, threads: int, steps: int,
                           seed: int, level: int, port: int) -> None:
    """A ZeRO-``level`` step (2: FSDP2 without resharding after forward, 3: with) on a
    process group of this one rank: its compute and FSDP2's own work per unit (hooks,
    copies in and out of the flat buffers, the optimizer on DTensor shards), no exchange."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from scalelab.profiler.memory import fsdp_units

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1, timeout=timedelta(seconds=120))
    try:
        spec, algorithm = _spec_of(spec_json)
        model = spec.build_model(seed=seed)
        for unit in fsdp_units(model):
            fully_shard(unit, reshard_after_forward=level == 3)
        fully_shard(model, reshard_after_forward=level == 3)
        _time_when_told(spec, model, batch_size, threads, steps, seed, algorithm=algorithm)
    finally:
        dist.destroy_process_group()


def _time_collectives_child(plan_json: str, addr: str, port: int, workers: int,
                            rank: int) -> None:
    """Replay a step's collectives (:class:`scalelab.theory.sharded_step.Collective` as
    ``[kind, numel, src]``) on Gloo, one after another as the step issues them (ZeRO-1's
    broadcasts all started, then waited for, as ``ZeroRedundancyOptimizer`` does; a ``send``
    from ``src`` to the next rank, blocking, as a pipeline stage's boundary); print the
    median time of the whole sequence over ``repeats``, and of each all-reduce in it."""
    import statistics
    import time
    import warnings
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # *_tensor names, all torchs
    plan = json.loads(plan_json)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank,
                            world_size=workers, timeout=timedelta(seconds=120))
    gap = float(plan.get("gap_s", 0.0))   # idle before each collective, as compute is
    try:
        bufs = []
        for kind, numel, src in plan["collectives"]:
            whole = torch.ones(numel)
            shard = torch.ones(max(numel // workers, 0))
            bufs.append((kind, whole, shard, src))

        def sequence() -> list[float]:
            """Run the collectives; the seconds of each all-reduce, in order."""
            pending, reduces = [], []
            for kind, whole, shard, src in bufs:
                if gap:
                    time.sleep(gap)
                if kind == "all_gather":
                    dist.all_gather_into_tensor(whole, shard)
                elif kind == "reduce_scatter":
                    dist.reduce_scatter_tensor(shard, whole)
                elif kind == "all_reduce":
                    t0 = time.perf_counter()
                    dist.all_reduce(whole)
                    reduces.append(time.perf_counter() - t0)
                elif kind == "send":  # a stage boundary's send: src to the next rank
                    if rank == src:
                        dist.send(whole, dst=(src + 1) % workers)
                    elif rank == (src + 1) % workers:
                        dist.recv(whole, src=src)
                else:
                    pending.append(dist.broadcast(whole, src=src, async_op=True))
            for w in pending:
                w.wait()
            return reduces

        sequence()  # warm: connections and buffers
        print("ready", flush=True)
        sys.stdin.readline()
        times, reduces = [], []
        for _ in range(int(plan["repeats"])):
            dist.barrier()
            t0 = time.perf_counter()
            reduces.append(sequence())
            times.append(time.perf_counter() - t0)
        dist.barrier()
        print(json.dumps({"exchange_s": statistics.median(times), "times_s": times,
                          "all_reduce_s": [statistics.median(r) for r in zip(*reduces)]}),
              flush=True)
    finally:
        dist.destroy_process_group()


def child_main(argv: list[str]) -> int:
    """``--time-steps SPEC_JSON BATCH THREADS STEPS SEED``: one step-timing process;
    ``--time-fed-steps ... SEED DATA LOADERS WORKERS WORKER``: one fed worker;
    ``--time-ddp-steps ... SEED PORT WORKERS RANK DDP``: one rank on loopback (DDP 1: a DDP
    model; 0: a plain one meeting the others before each step);
    ``--time-collectives PLAN_JSON ADDR PORT WORKERS RANK``: one rank replaying a step's
    collectives; ``--time-fsdp-steps SPEC_JSON BATCH THREADS STEPS SEED LEVEL PORT``: a
    ZeRO-2/3 step on one rank."""
    if len(argv) == 6 and argv[0] == "--time-steps":
        _time_steps_child(argv[1], int(argv[2]), int(argv[3]), int(argv[4]), int(argv[5]))
        return 0
    if len(argv) == 10 and argv[0] == "--time-ddp-steps":
        _time_ddp_steps_child(argv[1], *map(int, argv[2:10]))
        return 0
    if len(argv) == 8 and argv[0] == "--time-fsdp-steps":
        _time_fsdp_steps_child(argv[1], *map(int, argv[2:8]))
        return 0
    if len(argv) == 6 and argv[0] == "--time-collectives":
        _time_collectives_child(argv[1], argv[2], *map(int, argv[3:6]))
        return 0
    if len(argv) == 10 and argv[0] == "--time-fed-steps":
        _time_fed_steps_child(argv[1], int(argv[2]), int(argv[3]), int(argv[4]), int(argv[5]),
                              argv[6], int(argv[7]), int(argv[8]), int(argv[9]))
        return 0
    print("usage: python -m scalelab.experiment.timing_child --time-steps SPEC_JSON BATCH THREADS "
          "STEPS SEED | --time-fed-steps SPEC_JSON BATCH THREADS STEPS SEED DATA LOADERS "
          "WORKERS WORKER | --time-ddp-steps SPEC_JSON BATCH THREADS STEPS SEED PORT WORKERS "
          "RANK DDP | --time-collectives PLAN_JSON ADDR PORT WORKERS RANK | --time-fsdp-steps "
          "SPEC_JSON BATCH THREADS STEPS SEED LEVEL PORT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    from scalelab.runner.launch import leave

    leave(child_main(sys.argv[1:]))
