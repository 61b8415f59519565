"""Real data-parallel training on torch.distributed: parameter servers and all-reduce.

Public API::

    from scalelab.runner import RunConfig, run_training
    result = run_training(RunConfig(workload=spec, workers=2, ps=1, steps=20))
    # result is the content of run.json (scalelab.run/1)

With ``launcher="local"`` (default) this starts one process per rank on this machine (on an
emulated network when ``emulate_network`` is set) and waits for them; with
``launcher="torchrun"`` the calling process is one rank of a torchrun job and rank 0 gets
the result (other ranks get ``{}``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path

from scalelab.errors import UsageError
from scalelab.runner.config import RunConfig

__all__ = ["RunConfig", "run_training"]


def _precheck_checkpoints(cfg: RunConfig) -> None:
    from scalelab.runner import checkpoint

    if cfg.checkpoint_dir:
        checkpoint.check_folder(cfg)
    if not (cfg.resume and cfg.checkpoint_dir and Path(cfg.checkpoint_dir).is_dir()):
        return
    from scalelab.meta_build import meta_model

    model = meta_model(cfg.workload)
    if cfg.architecture == "fsdp":
        from scalelab.runner import fsdp

        fsdp.check_directory(cfg.checkpoint_dir, checkpoint.identity(cfg, model))
        return
    checkpoint.check_directory(cfg.checkpoint_dir, checkpoint.identity(cfg, model))


def _precheck_devices(cfg: RunConfig) -> None:
    """Refuse a placement no rank could take before any process starts."""
    from scalelab.runner.devices import check_local

    count = 0
    if cfg.device == "cuda":
        import torch

        count = torch.cuda.device_count()
    check_local(cfg, count)


def _open_network(cfg: RunConfig, stack: ExitStack):
    try:
        from scalelab import netem
    except ImportError:
        raise UsageError("emulated networks are not available in this installation") from None
    netem.check_available()
    netem.parse_rate(cfg.emulate_network)
    return stack.enter_context(netem.emulated_network(cfg.num_hosts, cfg.emulate_network))


def _nccl_on(ifname: str) -> dict[str, str]:
    """NCCL environment that keeps all-reduce traffic on the emulated link ``ifname``.

    NCCL ranks of one machine would otherwise talk through GPU peer-to-peer copies or
    shared memory, around the shaped link: those transports and InfiniBand are switched off
    and the socket transport is bound to the namespace's interface (NCCL's documented
    NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE, NCCL_SOCKET_IFNAME). Gloo ranks
    ignore these. Not yet run on a GPU.
    """
    return {"NCCL_SOCKET_IFNAME": ifname, "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
            "NCCL_IB_DISABLE": "1"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def make_workdir(kind: str) -> Path:
    """A new temporary folder ``scalelab-<kind>-<pid>-XXXX`` for this process's job, after
    removing those of earlier jobs whose process is gone: a job killed by SIGKILL cannot
    remove its own (the ``finally`` below never runs), the next one does."""
    for old in Path(tempfile.gettempdir()).glob(f"scalelab-{kind}-*-*"):
        pid = old.name.split("-")[2]
        try:
            mine = old.is_dir() and old.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"scalelab-{kind}-{os.getpid()}-"))


def _precheck_tokens(cfg: RunConfig) -> None:
    """A language model's token file, opened and checked (ids below the vocabulary, one
    sequence at least) before any process starts: one line, exit 2."""
    from scalelab.runner.data import TokenFileShards

    TokenFileShards(cfg.workload, cfg.data, cfg.seed, cfg.workers, cfg.batch_size)


def run_training(config: RunConfig, progress=None, ranks_path=None) -> dict:
    """Train as ``config`` says and return the run (the content of run.json).

    ``progress(record)`` is called with each step line of worker 0 as it arrives.
    ``ranks_path``: where to write every rank's step lines (JSON lines), if anywhere.
    Raises UsageError for bad input, RunFailure when a rank fails or the job hangs.
    """
    cfg = config
    if cfg.launcher == "torchrun":
        return _run_torchrun(cfg, ranks_path)
    from scalelab.runner.launch import Job, RankSpec, cpu_count

    _precheck_checkpoints(cfg)
    _precheck_devices(cfg)
    if cfg.data not in (None, "", "synthetic") and cfg.workload.tokens:
        _precheck_tokens(cfg)
    elif cfg.data not in (None, "", "synthetic") and not Path(cfg.data).is_dir():
        raise UsageError(f"--data {cfg.data}: not a folder")
    workdir = make_workdir("run")
    try:
        with ExitStack() as stack:
            net = _open_network(cfg, stack) if cfg.emulate_network else None
            config_path = workdir / "config.json"
            config_path.write_text(json.dumps(cfg.to_dict()))
            worker_threads = max(1, cpu_count() // cfg.workers)
            ranks = []
            for r in range(cfg.world_size):
                role, _ = cfg.role_of(r)
                env = {"SCALELAB_THREADS": str(worker_threads if role == "worker" else 1)}
                prefix: list[str] = []
                if net is not None:
                    h = cfg.host_of(r)
                    prefix = net.exec_prefix(h)
                    env["GLOO_SOCKET_IFNAME"] = net.hosts[h].ifname
                    env.update(_nccl_on(net.hosts[h].ifname))
                else:
                    env["GLOO_SOCKET_IFNAME"] = "lo"
                ranks.append(RankSpec(r, cfg.describe_rank(r), prefix, env))
            job = Job(workdir, config_path, ranks,
                      master_addr=net.hosts[0].ip if net is not None else "127.0.0.1",
                      timeout_s=cfg.timeout_s, progress_rank=0, warm=cfg.device == "cpu")
            return job.run(progress, net, ranks_path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_torchrun(cfg: RunConfig, ranks_path) -> dict:
    from scalelab.runner.entry import env_rank, run_rank

    if cfg.emulate_network:
        raise UsageError("--emulate-network needs --launcher local")
    if cfg.checkpoint_dir:
        from scalelab.runner import checkpoint

        checkpoint.check_folder(cfg)
    rank, world_size, local_rank = env_rank()
    if not cfg.threads and "SCALELAB_THREADS" not in os.environ:
        from scalelab.runner.launch import cpu_count

        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        os.environ["SCALELAB_THREADS"] = str(max(1, cpu_count() // max(1, local)))
    workdir = make_workdir(f"rank{rank}")
    try:
        result = run_rank(cfg, rank, world_size, workdir, local_rank)
        if ranks_path:
            from scalelab.results import write_text_atomic

            p = Path(ranks_path)
            target = p if rank == 0 else p.with_name(f"{p.stem}.rank{rank}{p.suffix}")
            write_text_atomic(target, (workdir / f"rank-{rank}.jsonl").read_text())
        return result or {}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
