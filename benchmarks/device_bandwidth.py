"""Bandwidth between a device and its peers: host<->device copies, Gloo staged, NCCL.

Three measurements, each bytes / seconds of one transfer in one direction (nccl-tests'
point-to-point definition), over message sizes from ``--min-bytes`` to ``--max-bytes``:

- ``copies``: device->host and host->device copies of one tensor, into pinned and into
  pageable host memory, timed with a synchronize around ``iters`` copies (CUDA only).
- ``gloo_staged``: what a parameter-server worker on a GPU does per piece
  (:mod:`scalelab.runner.stage`): rank 0 copies a device tensor into a pinned host buffer,
  waits for the copy and sends it over Gloo (TCP loopback); rank 1 receives into a pinned
  buffer and copies it to its device. The time runs from the first copy to the last one
  landing, so the copies are included. ``gloo_host`` is the same transfer host to host
  (no copies), for comparison. With ``--device cpu`` the "device" is the CPU and the
  copies are plain memory copies: that runs the logic where there is no GPU.
- ``nccl``: device to device ``isend``/``irecv`` on NCCL between GPUs 0 and 1. NCCL refuses
  two ranks on one GPU, so with one GPU this is skipped, and the JSON says why.

    python benchmarks/device_bandwidth.py --device cuda --out gpu-check-out/device_bandwidth.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _iters(nbytes: int, budget_bytes: float) -> int:
    return max(3, min(100, int(budget_bytes // max(nbytes, 1))))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(op, iters: int, device: torch.device) -> float:
    """Mean seconds of ``op()`` over ``iters`` calls after two untimed warm-up calls."""
    for _ in range(2):
        op()
    _sync(device)
    t = time.perf_counter()
    for _ in range(iters):
        op()
    _sync(device)
    return (time.perf_counter() - t) / iters


def copies(device: torch.device, sizes: list[int], budget_bytes: float) -> list[dict]:
    """Device<->host copy bandwidth into pinned and pageable host memory."""
    rows = []
    for size in sizes:
        n = size // 4
        dev = torch.ones(n, device=device)
        row = {"bytes": n * 4}
        for kind, pin in (("pinned", True), ("pageable", False)):
            host = torch.empty(n, pin_memory=pin)
            it = _iters(size, budget_bytes)
            d2h = _timed(lambda h=host, d=dev: h.copy_(d, non_blocking=True), it, device)
            h2d = _timed(lambda h=host, d=dev: d.copy_(h, non_blocking=True), it, device)
            row[f"d2h_{kind}_Bps"] = n * 4 / d2h
            row[f"h2d_{kind}_Bps"] = n * 4 / h2d
        rows.append(row)
    return rows


def _init(rank: int, backend: str, port: int, device: torch.device) -> None:
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    kw = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=120), **kw)


def _transfer_s(rank: int, size: int, device: torch.device, mode: str, budget: float) -> float:
    """Seconds per one-way transfer of ``size`` bytes from rank 0 to rank 1."""
    n = size // 4
    dev = torch.ones(n, device=device)
    pin = device.type == "cuda"
    host = torch.empty(n, pin_memory=pin)

    def staged():
        if rank == 0:
            host.copy_(dev, non_blocking=True)
            _sync(device)  # the copy must have landed before Gloo reads the buffer
            dist.isend(host, 1, tag=3).wait()
        else:
            dist.irecv(host, 0, tag=3).wait()
            dev.copy_(host, non_blocking=True)
            _sync(device)

    def plain():
        buf = dev if mode == "nccl" else host
        (dist.isend(buf, 1, tag=3) if rank == 0 else dist.irecv(buf, 0, tag=3)).wait()
        _sync(device)

    op = staged if mode == "gloo_staged" else plain
    iters = _iters(size, budget)
    for count in (2, iters):
        dist.barrier()
        t = time.perf_counter()
        for _ in range(count):
            op()
        dist.barrier()
        elapsed = time.perf_counter() - t
    return elapsed / iters


def _pair(rank: int, port: int, backend: str, device_type: str, sizes: list[int],
          modes: list[str], budget: float, queue) -> None:
    if device_type != "cuda":
        device = torch.device("cpu")
    else:  # NCCL: one GPU per rank; Gloo: as parameter-server workers, k mod count
        device = torch.device("cuda", rank % torch.cuda.device_count())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    _init(rank, backend, port, device)
    rows = []
    for size in sizes:
        row = {"bytes": size // 4 * 4}
        for mode in modes:
            t = _transfer_s(rank, size, device, mode, budget)
            row[f"{mode}_s"] = t
            row[f"{mode}_Bps"] = row["bytes"] / t
        rows.append(row)
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def pair(backend: str, device_type: str, sizes: list[int], modes: list[str],
         budget: float) -> list[dict]:
    from scalelab.runner.launch import free_port

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_pair, args=(free_port(), backend, device_type, sizes, modes, budget,
                                    queue), nprocs=2, start_method="spawn", join=True)
    return queue.get()


def measure(device_type: str, sizes: list[int], budget_bytes: float) -> dict:
    result: dict = {"benchmark": "device_bandwidth", "device": device_type,
                    "torch": torch.__version__, "sizes": sizes, "skipped": {}}
    if device_type == "cuda":
        result["device_name"] = torch.cuda.get_device_name(0)
        result["gpus"] = torch.cuda.device_count()
        result["copies"] = copies(torch.device("cuda", 0), sizes, budget_bytes)
    else:
        result["skipped"]["copies"] = "device<->host copies need CUDA"
    result["gloo"] = pair("gloo", device_type, sizes, ["gloo_staged", "gloo_host"], budget_bytes)
    if device_type != "cuda":
        result["skipped"]["nccl"] = "NCCL needs CUDA"
    elif not dist.is_nccl_available():
        result["skipped"]["nccl"] = "this torch has no NCCL"
    elif torch.cuda.device_count() < 2:
        result["skipped"]["nccl"] = ("NCCL point-to-point needs two GPUs (NCCL refuses two "
                                     "ranks on one device); this host has "
                                     f"{torch.cuda.device_count()}")
    else:
        result["nccl"] = pair("nccl", "cuda", sizes, ["nccl"], budget_bytes)
    return result


def _print(result: dict) -> None:
    print(f"device_bandwidth on {result.get('device_name', result['device'])} (GB/s, one way)")
    cols = [("copies", "d2h_pinned_Bps"), ("copies", "h2d_pinned_Bps"),
            ("copies", "d2h_pageable_Bps"), ("copies", "h2d_pageable_Bps"),
            ("gloo", "gloo_staged_Bps"), ("gloo", "gloo_host_Bps"), ("nccl", "nccl_Bps")]
    cols = [(g, k) for g, k in cols if g in result]
    print(f"{'bytes':>10} " + " ".join(f"{k.removesuffix('_Bps'):>16}" for _, k in cols))
    for i, size in enumerate(result["sizes"]):
        vals = [result[g][i][k] / 1e9 for g, k in cols]
        print(f"{size:>10} " + " ".join(f"{v:>16.3f}" for v in vals))
    for what, why in result["skipped"].items():
        print(f"{what}: skipped ({why})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default=None,
                    help="default: cuda when torch sees a GPU")
    ap.add_argument("--min-bytes", type=int, default=64 * 1024)
    ap.add_argument("--max-bytes", type=int, default=256 * 2**20)
    ap.add_argument("--budget-bytes", type=float, default=2e9,
                    help="bytes moved per size and measurement, at most (sets the repeats)")
    ap.add_argument("--out", default="bench-out/device_bandwidth.json")
    args = ap.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("device_bandwidth: --device cuda but torch sees no GPU", file=sys.stderr)
        return 2
    if not 4 <= args.min_bytes <= args.max_bytes:
        print("device_bandwidth: need 4 <= --min-bytes <= --max-bytes", file=sys.stderr)
        return 2
    sizes, s = [], args.min_bytes
    while s <= args.max_bytes:
        sizes.append(s)
        s *= 4
    result = measure(device, sizes, args.budget_bytes)
    _print(result)
    from scalelab.results import write_text_atomic

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_text_atomic(args.out, json.dumps(result, indent=2))
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
