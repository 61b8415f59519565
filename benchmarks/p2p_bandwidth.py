"""Point-to-point and all-reduce bandwidth of the Gloo transport against message size.

Definitions as in nccl-tests: for point-to-point, bandwidth = bytes / time of one transfer
(one direction; ``bidir`` sends both ways at once and reports per-direction bandwidth); for
all-reduce, ``algbw = bytes / time`` and ``busbw = algbw * 2 (N-1) / N``
(``scalelab.theory.comm.nccl_bus_bandwidth_Bps``), the rate each link must carry.

``streamed``: the pattern the parameter server uses, every message of a transfer posted at
once (no wait between messages), on 1 and 2 links at once (rank i sends to rank i+k); the
figure is the bandwidth of one link while all k carry traffic. On loopback every link
shares the host's cores, so k links do not carry k times one link's traffic.

    python benchmarks/p2p_bandwidth.py --out bench-out/p2p_bandwidth.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from scalelab.results import write_text_atomic
from scalelab.runner.launch import free_port
from scalelab.theory.comm import nccl_bus_bandwidth_Bps


def _iters(nbytes: int) -> int:
    return max(3, min(200, int(64e6 // max(nbytes, 1))))


def _seconds_per_op(op, iters: int) -> float:
    """Mean seconds of ``op()`` over ``iters`` calls, after two untimed warm-up calls."""
    for count in (2, iters):
        dist.barrier()
        t = time.perf_counter()
        for _ in range(count):
            op()
        dist.barrier()
        elapsed = time.perf_counter() - t
    return elapsed / iters


def _p2p(rank: int, size: int, bidir: bool) -> float:
    n = size // 4
    buf_out, buf_in = torch.ones(n), torch.empty(n)
    peer = 1 - rank

    def transfer():
        works = []
        if rank == 0 or bidir:
            works.append(dist.isend(buf_out, peer, tag=1))
        if rank == 1 or bidir:
            works.append(dist.irecv(buf_in, peer, tag=1))
        for w in works:
            w.wait()

    return _seconds_per_op(transfer, _iters(size))


def _allreduce(size: int) -> float:
    buf = torch.ones(size // 4)
    return _seconds_per_op(lambda: dist.all_reduce(buf), _iters(size))


def _streamed(rank: int, links: int, size: int, count: int,
              repeats: int) -> tuple[float, float]:
    """Median seconds of ``repeats`` transfers of ``count`` messages of ``size`` bytes on each
    of ``links`` links at once (after one untimed), and the CPU seconds all ranks used per
    transfer meanwhile (every thread of each process)."""
    sender = rank < links
    peer = rank + links if sender else rank - links
    bufs = [torch.ones(size // 4) for _ in range(count)]
    op = dist.isend if sender else dist.irecv
    times, cpus = [], []
    for _ in range(1 + repeats):
        dist.barrier()
        t, cpu = time.perf_counter(), time.process_time()
        works = [op(b, peer, tag=2) for b in bufs]
        for w in works:
            w.wait()
        cpus.append(time.process_time() - cpu)
        dist.barrier()
        times.append(time.perf_counter() - t)
    total_cpu = torch.tensor([statistics.median(cpus[1:])], dtype=torch.float64)
    dist.all_reduce(total_cpu)
    return statistics.median(times[1:]), float(total_cpu)


def _init(rank: int, world: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))


def _links_worker(rank: int, world: int, port: int, size: int, count: int, repeats: int,
                  queue) -> None:
    _init(rank, world, port)
    timing = _streamed(rank, world // 2, size, count, repeats)
    if rank == 0:
        queue.put(timing)
    dist.destroy_process_group()


def measure_links(links: int, size: int, total_bytes: int = 32 * 2**20,
                  repeats: int = 9) -> dict:
    """One link's bandwidth while ``links`` links each stream ``total_bytes`` in messages of
    ``size`` bytes, all posted at once, from the median of ``repeats`` transfers (a step's
    exchange is a median over steps too; one transfer alone reads up to twice as fast when
    the scheduler happens to leave both ends a core each): ``{"per_link_Bps", "busy_cores",
    "cpu_s_per_byte"}`` (``busy_cores``: CPU time of all ranks over the elapsed time)."""
    count = max(1, total_bytes // size)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_links_worker,
                       args=(2 * links, free_port(), size, count, repeats, queue),
                       nprocs=2 * links, start_method="spawn", join=True)
    elapsed, cpu = queue.get()
    moved = count * size * links
    return {"per_link_Bps": count * size / elapsed, "busy_cores": cpu / elapsed,
            "cpu_s_per_byte": cpu / moved}


def _exchange_worker(rank: int, workers: int, servers: int, port: int, numel: int,
                     piece: int, repeats: int, queue, spec=None) -> None:
    """The parameter server's exchange on Gloo with nothing else: ranks 0..W-1 are workers,
    W..W+P-1 servers. Each worker sends every piece of a ``numel``-element vector (server k
    owns the k-th of P even chunks) to its server, all posted at once; a server returns
    each piece to every worker as soon as it has that piece from all of them.

    With ``spec`` (a :class:`scalelab.workload.WorkloadSpec`) a server also does what the
    runner's server does between a piece's last arrival and its answer: sums the W pieces in
    place and steps the workload's optimizer, fused, on that piece (the summed gradient
    divided by W through ``grad_scale``), and answers with the fresh piece."""
    _init(rank, workers + servers, port)
    bounds = [k * numel // servers for k in range(servers + 1)]
    pieces = [(k, a, min(a + piece, bounds[k + 1]))
              for k in range(servers) for a in range(bounds[k], bounds[k + 1], piece)]
    times, cpu = [], []
    if rank < workers:
        grad, fresh = torch.ones(numel), torch.empty(numel)
    else:
        k = rank - workers
        mine = [(i, a, b) for i, (s, a, b) in enumerate(pieces) if s == k]
        inbox = {(w, i): torch.empty(b - a) for w in range(workers) for i, a, b in mine}
        values, opts = {}, {}
        if spec is not None:
            for i, a, b in mine:
                values[i] = torch.nn.Parameter(torch.zeros(b - a))
                opts[i] = spec.make_optimizer([values[i]], fused=True)
                if workers > 1:
                    opts[i].grad_scale = torch.tensor(float(workers))
    for _ in range(1 + repeats):
        dist.barrier()
        t, c = time.perf_counter(), time.process_time()
        if rank < workers:
            pulls = [dist.irecv(fresh[a:b], workers + s, tag=i)
                     for i, (s, a, b) in enumerate(pieces)]
            pushes = [dist.isend(grad[a:b], workers + s, tag=i)
                      for i, (s, a, b) in enumerate(pieces)]
            for w in pushes + pulls:
                w.wait()
        else:
            recvs = {key: dist.irecv(buf, key[0], tag=key[1]) for key, buf in inbox.items()}
            sends = []
            for i, _, _ in mine:
                for w in range(workers):
                    recvs[(w, i)].wait()
                out = inbox[(0, i)]
                if spec is not None:
                    for w in range(1, workers):
                        out.add_(inbox[(w, i)])
                    values[i].grad = out
                    opts[i].step()
                    out = values[i].detach()
                sends += [dist.isend(out, w, tag=i) for w in range(workers)]
            for w in sends:
                w.wait()
        cpu.append(time.process_time() - c)  # before the barrier: its wait is not the exchange's
        dist.barrier()
        times.append(time.perf_counter() - t)
    queue.put((rank, statistics.median(times[1:]), statistics.median(cpu[1:])))
    dist.destroy_process_group()


def exchange_cost(workers: int, servers: int, param_bytes: int, piece_bytes: int,
                  repeats: int = 9, spec=None) -> dict:
    """The parameter server's exchange of ``param_bytes`` per worker on Gloo alone (no model,
    no optimizer: :func:`_exchange_worker`), ``repeats`` rounds; with ``spec`` the servers
    also sum and apply the workload's optimizer to every piece. ``time_s``: the median
    seconds of a round; ``cpu_s``: the CPU it costs, every rank's CPU time per round (all
    its threads, Gloo's and the kernel's work for its sockets included), each rank's median
    over the rounds, summed; ``cpu_per_rank_s`` those medians by rank."""
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_exchange_worker,
                       args=(workers, servers, free_port(), param_bytes // 4,
                             max(1, piece_bytes // 4), repeats, queue, spec),
                       nprocs=workers + servers, start_method="spawn", join=True)
    got = sorted(queue.get() for _ in range(workers + servers))
    return {"time_s": got[0][1], "cpu_s": sum(c for _, _, c in got),
            "cpu_per_rank_s": [c for _, _, c in got]}


def _worker(rank: int, world: int, port: int, sizes: list[int], queue) -> None:
    _init(rank, world, port)
    rows = []
    for size in sizes:
        row = {"bytes": size}
        if world == 2:
            row["p2p_s"] = _p2p(rank, size, bidir=False)
            row["bidir_s"] = _p2p(rank, size, bidir=True)
        row["allreduce_s"] = _allreduce(size)
        rows.append(row)
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def measure(world: int, sizes: list[int]) -> list[dict]:
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(world, free_port(), sizes, queue), nprocs=world,
                       start_method="spawn", join=True)
    return queue.get()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-bytes", type=int, default=4096)
    ap.add_argument("--max-bytes", type=int, default=64 * 2**20)
    ap.add_argument("--ranks", default="2,4", help="all-reduce member counts (default 2,4)")
    ap.add_argument("--stream-bytes", type=int, default=2**20,
                    help="message size of the streamed measurement (default 1 MiB)")
    ap.add_argument("--out", default="bench-out/p2p_bandwidth.json")
    args = ap.parse_args(argv)
    sizes, s = [], args.min_bytes
    while s <= args.max_bytes:
        sizes.append(s)
        s *= 4
    result = {"benchmark": "p2p_bandwidth", "transport": "gloo/tcp loopback",
              "torch": torch.__version__, "cpus": os.cpu_count(), "p2p": [], "allreduce": {}}
    print(f"{'bytes':>10} {'p2p GB/s':>9} {'bidir GB/s':>11} {'ar2 algbw':>10} {'ar2 busbw':>10}")
    for world in [int(x) for x in args.ranks.split(",")]:
        rows = measure(world, sizes)
        ar = []
        for row in rows:
            t = row["allreduce_s"]
            ar.append({"bytes": row["bytes"], "time_s": t, "algbw_Bps": row["bytes"] / t,
                       "busbw_Bps": nccl_bus_bandwidth_Bps(row["bytes"], world, t)})
            if world == 2:
                result["p2p"].append({
                    "bytes": row["bytes"], "time_s": row["p2p_s"],
                    "bandwidth_Bps": row["bytes"] / row["p2p_s"],
                    "bidir_time_s": row["bidir_s"],
                    "bidir_bandwidth_Bps": row["bytes"] / row["bidir_s"]})
        result["allreduce"][str(world)] = ar
    by_size = {r["bytes"]: r for r in result["p2p"]}
    ar2 = {r["bytes"]: r for r in result["allreduce"].get("2", [])}
    for size in sizes:
        p, a = by_size.get(size), ar2.get(size)
        print(f"{size:>10} {p['bandwidth_Bps'] / 1e9 if p else 0:>9.3f} "
              f"{p['bidir_bandwidth_Bps'] / 1e9 if p else 0:>11.3f} "
              f"{a['algbw_Bps'] / 1e9 if a else 0:>10.3f} "
              f"{a['busbw_Bps'] / 1e9 if a else 0:>10.3f}")
    for world, rows in result["allreduce"].items():
        big = rows[-1]
        print(f"all-reduce N={world} at {big['bytes']} B: algbw {big['algbw_Bps'] / 1e9:.3f} GB/s,"
              f" busbw {big['busbw_Bps'] / 1e9:.3f} GB/s")
    if result["p2p"]:
        big = result["p2p"][-1]
        result["p2p_peak_Bps"] = max(r["bandwidth_Bps"] for r in result["p2p"])
        result["duplex_ratio"] = big["bidir_bandwidth_Bps"] / big["bandwidth_Bps"]
        print(f"p2p peak {result['p2p_peak_Bps'] / 1e9:.3f} GB/s; both directions at once "
              f"keep {result['duplex_ratio']:.2f}x of it per direction at {big['bytes']} B")
    size = args.stream_bytes
    result["streamed"] = []
    print(f"streamed, {size} B messages all posted at once, 32 MiB per link (median of 9 "
          "transfers, best of 3 runs):")
    for links in (1, 2):
        best = max((measure_links(links, size) for _ in range(3)),
                   key=lambda m: m["per_link_Bps"])
        bw = best["per_link_Bps"]
        result["streamed"].append({"links": links, "bytes": size, **best,
                                   "aggregate_Bps": bw * links})
        print(f"  {links} link(s) at once: {bw / 1e9:.3f} GB/s per link, "
              f"{bw * links / 1e9:.3f} GB/s in all; {best['busy_cores']:.2f} of "
              f"{len(os.sched_getaffinity(0))} cores busy, "
              f"{best['cpu_s_per_byte'] * 2**26 * 1e3:.1f} ms CPU per 64 MiB moved")
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
