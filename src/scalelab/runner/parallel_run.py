"""Run a tensor-, pipeline- or FSDP x tensor-parallel training job. Public API::

    from scalelab.models.config import TransformerConfig
    from scalelab.parallel import ParallelLayout
    from scalelab.runner.parallel_config import ParallelRunConfig
    from scalelab.runner.parallel_run import run_parallel

    cfg = ParallelRunConfig(model=TransformerConfig("tiny", "llama", layers=4, hidden=64,
                                                    heads=4, kv_heads=2, vocab=128, ffn=128),
                            layout=ParallelLayout(tp=2, pp=2, accumulation=4,
                                                  precision="fp32"),
                            seq_len=32, steps=10)
    result = run_parallel(cfg)   # the content of run.json (scalelab.run/1)

With ``launcher="local"`` this starts one process per rank on this machine
(:class:`scalelab.runner.launch.Job`, which stops every rank and names the one that failed
when any rank raises, dies or hangs); with ``launcher="torchrun"`` this process is one rank
of a torchrun job and rank 0 gets the result (the others ``{}``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from scalelab.errors import UsageError
from scalelab.runner.parallel_config import ParallelRunConfig


def precheck(cfg: ParallelRunConfig) -> None:
    """Refuse, before any rank starts, what no rank could do."""
    if cfg.resume and cfg.checkpoint_dir and Path(cfg.checkpoint_dir).is_dir():
        from scalelab.runner.parallel_checkpoint import check_directory

        check_directory(cfg.checkpoint_dir, cfg.identity())
    if cfg.device == "cuda":
        import torch

        have = torch.cuda.device_count()
        if have < cfg.world_size:
            raise UsageError(f"{cfg.world_size} ranks on cuda need one GPU each; "
                             f"torch sees {have} on this host")


def progress_rank(cfg: ParallelRunConfig) -> int:
    """The rank whose steps carry the loss: the last stage's first (dp 0, tp 0)."""
    from scalelab.runner.mesh import Coords, rank_of

    lay = cfg.layout
    last_pp = (lay.pp * lay.vpp - 1) % lay.pp
    return rank_of(lay, Coords(pp=last_pp, dp=0, cp=0, tp=0))


def run_parallel(cfg: ParallelRunConfig, progress=None, ranks_path=None,
                 launcher: str = "local", watch_rank: int | None = None) -> dict:
    """Train as ``cfg`` says; the run (run.json's content).

    ``progress(record)``: called with each step line of ``watch_rank`` (default
    :func:`progress_rank`). Raises UsageError for bad input, RunFailure when a rank fails."""
    if launcher == "torchrun":
        if cfg.emulate_network:
            raise UsageError("--emulate-network starts every rank on a host of its own: it "
                             "needs the local launcher, not torchrun")
        return _run_torchrun(cfg, ranks_path)
    if launcher != "local":
        raise UsageError(f"unknown launcher {launcher!r} (local or torchrun)")
    from contextlib import ExitStack

    from scalelab.runner.launch import Job, RankSpec, cpu_count

    precheck(cfg)
    workdir = Path(tempfile.mkdtemp(prefix="scalelab-parallel-"))
    try:
        with ExitStack() as stack:
            net = None
            if cfg.emulate_network:
                from scalelab import netem

                netem.check_available()
                net = stack.enter_context(netem.emulated_network(cfg.world_size,
                                                                 cfg.emulate_network))
            config_path = workdir / "config.json"
            config_path.write_text(json.dumps(cfg.to_dict()))
            threads = str(max(1, cpu_count() // cfg.world_size))
            # on an emulated network each rank is a host of its own, behind its shaped link
            ranks = [RankSpec(r, cfg.describe_rank(r),
                              net.exec_prefix(r) if net is not None else [],
                              {"SCALELAB_THREADS": threads,
                               "GLOO_SOCKET_IFNAME": net.hosts[r].ifname if net is not None
                               else "lo"})
                     for r in range(cfg.world_size)]
            watch = progress_rank(cfg) if watch_rank is None else watch_rank
            job = Job(workdir, config_path, ranks,
                      master_addr=net.hosts[0].ip if net is not None else "127.0.0.1",
                      timeout_s=cfg.timeout_s, progress_rank=watch, warm=cfg.device == "cpu",
                      module="scalelab.runner.parallel_train")
            return job.run(progress, net, ranks_path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_torchrun(cfg: ParallelRunConfig, ranks_path) -> dict:
    import os

    from scalelab.runner.entry import env_rank
    from scalelab.runner.parallel_train import run_rank

    rank, world_size, local_rank = env_rank()
    workdir = Path(tempfile.mkdtemp(prefix=f"scalelab-rank{rank}-"))
    try:
        if not cfg.threads and "SCALELAB_THREADS" not in os.environ:
            from scalelab.runner.launch import cpu_count

            local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
            os.environ["SCALELAB_THREADS"] = str(max(1, cpu_count() // max(1, local)))
        result = run_rank(cfg, rank, world_size, workdir, local_rank)
        if ranks_path:
            from scalelab.results import write_text_atomic

            p = Path(ranks_path)
            target = p if rank == 0 else p.with_name(f"{p.stem}.rank{rank}{p.suffix}")
            f = workdir / f"rank-{rank}.jsonl"
            write_text_atomic(target, f.read_text() if f.exists() else "")
        return result or {}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
