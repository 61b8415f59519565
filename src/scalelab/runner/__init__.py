"""Real data-parallel training on torch.distributed: parameter server (sync, async) and DDP.

Python API::

    from scalelab.runner import RunConfig, run_training
    from scalelab.workload import WorkloadSpec

    run = run_training(RunConfig(WorkloadSpec("resnet18", input_shape=(3, 32, 32)),
                                 workers=2, ps=1, batch_size=8, steps=10))
    run["steps"]["step_s"]["median"], run["final_param_checksum"]

``run_training`` returns the content of ``run.json`` (``scalelab.run/1``).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from scalelab.errors import UsageError
from scalelab.runner.config import RunConfig
from scalelab.runner.launch import RankSpec, launch_local

__all__ = ["RunConfig", "run_training", "prepare"]


def prepare(config: RunConfig) -> RunConfig:
    """Check what can be checked before starting processes; resolve the resume step."""
    import dataclasses

    from scalelab.runner import checkpoint
    from scalelab.runner.partition import make_partition

    with _meta_model(config) as params:
        shapes = [tuple(p.shape) for p in params]
        if config.architecture == "ps":
            elem = params[0].element_size() if params else 4
            piece = max(1, config.piece_bytes // elem) if config.piece_bytes else None
            make_partition([p.numel() for p in params], config.ps, config.partition, piece)
    if config.data:
        from scalelab.runner.data import make_data

        make_data(config)
    if config.resume:
        step = checkpoint.resume_step(config, shapes)
        config = dataclasses.replace(config, start_step=step)
    if config.checkpoint_dir:
        try:
            Path(config.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--checkpoint-dir {config.checkpoint_dir}: {e.strerror}") from None
    return config


class _meta_model:
    def __init__(self, config):
        self.config = config

    def __enter__(self):
        import torch

        try:
            with torch.device("meta"):
                model = self.config.workload.build_model(seed=None)
        except UsageError:
            raise
        except Exception:  # noqa: BLE001 - models that cannot be built on meta
            model = self.config.workload.build_model(seed=None)
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise UsageError(f"model {self.config.workload.model!r} has no trainable parameters")
        return params

    def __exit__(self, *exc):
        return False


def run_training(config: RunConfig, progress=None) -> dict:
    """Run ``config`` with the local launcher; returns the run.json content.

    ``progress(done_steps, total_steps, line)`` is called with worker 0's step lines.
    With ``config.log_dir`` the per-rank JSON lines (``rank-<r>.jsonl``) are kept there.
    With ``config.emulate_network`` every rank runs inside its own emulated host.
    """
    config = prepare(config)
    keep = config.log_dir is not None
    log_dir = Path(config.log_dir) if keep else Path(tempfile.mkdtemp(prefix="scalelab-run-"))
    try:
        if config.emulate_network:
            return _run_emulated(config, log_dir, progress)
        ranks = [RankSpec(r) for r in range(config.world_size)]
        out = launch_local(config, log_dir, ranks, progress=progress)
    finally:
        if not keep:
            shutil.rmtree(log_dir, ignore_errors=True)
    if keep:
        out["rank_logs"] = str(log_dir)
    return out


def _run_emulated(config: RunConfig, log_dir: Path, progress) -> dict:
    try:
        from scalelab import netem
    except ImportError:
        raise UsageError("--emulate-network: this scalelab has no emulated networks") from None
    rate_bps = netem.parse_rate(config.emulate_network)
    netem.check_available()
    with netem.emulated_network(config.num_hosts, rate_bps) as net:
        ranks = []
        for r in range(config.world_size):
            h = config.host_of(r)
            ranks.append(RankSpec(r, prefix=net.exec_prefix(h),
                                  env={"GLOO_SOCKET_IFNAME": net.hosts[h].ifname}))
        out = launch_local(config, log_dir, ranks, master_addr=net.hosts[0].ip,
                           progress=progress)
    out["network"] = {"rate_bps": rate_bps, "hosts": len(net.hosts)}
    return out
