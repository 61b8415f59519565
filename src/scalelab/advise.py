"""The main job: one command from a model to advice, with pictures.

``advise`` profiles the model on this device (or reuses a cached profile of the same
model, input, classes, optimizer, device and torch version), plans data-parallel training
for the given cluster (without one: for this machine when it has several GPUs, and for the
example clusters shipped in ``examples/``), optionally runs the recommended configuration
for a few real steps here (``check``), and writes ``report.html`` beside the JSON files.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from scalelab.errors import UsageError
from scalelab.profiler import ProfileOptions, run_profile
from scalelab.results import read_json, write_json
from scalelab.workload import WorkloadSpec

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


def cache_dir() -> Path:
    """``$SCALELAB_CACHE``, else ``$XDG_CACHE_HOME/scalelab``, else ``~/.cache/scalelab``."""
    if os.environ.get("SCALELAB_CACHE"):
        return Path(os.environ["SCALELAB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "scalelab"


def profile_key(spec: WorkloadSpec, device: str) -> str:
    """What makes two profiles interchangeable: workload, device, torch version."""
    ident = {"model": spec.model, "input_shape": list(spec.input_shape),
             "num_classes": spec.num_classes, "optimizer": spec.optimizer, "device": device,
             "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
             "torch": torch.__version__}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    return f"{spec.model.replace(':', '_').replace('/', '_')}-{digest}"


def cached_profile(spec: WorkloadSpec, options: ProfileOptions, fresh: bool = False,
                   directory: Path | None = None, progress=None) -> tuple[dict, bool, Path]:
    """The profile of ``spec``, from the cache unless ``fresh``; returns (profile, hit, path)."""
    path = (directory or cache_dir()) / "profiles" / f"{profile_key(spec, options.device)}.json"
    if not fresh and path.exists():
        try:
            return read_json(path, "profile"), True, path
        except UsageError:
            pass  # a damaged cache entry is measured again
    prof = run_profile(spec, options, progress=progress)
    try:
        write_json(path, "profile", prof)
    except UsageError:
        pass  # an unwritable cache costs a re-measurement next time, nothing else
    return {"schema": "scalelab.profile/1", **prof}, False, path


def default_clusters() -> list[Path]:
    """The example cluster files shipped with scalelab."""
    return sorted(EXAMPLES_DIR.glob("cluster-*.toml")) if EXAMPLES_DIR.is_dir() else []


def this_machine_cluster(profile: dict):
    """This machine as a cluster, when it has several GPUs (a single device has no plan)."""
    from scalelab.plan import Cluster

    if profile.get("device") != "cuda" or torch.cuda.device_count() < 2:
        return None
    return Cluster(nodes=1, gpus_per_node=torch.cuda.device_count(), network="10GbE",
                   architecture="allreduce")


@dataclass
class AdviseOptions:
    out_dir: str = "scalelab-out"
    clusters: list[str] = field(default_factory=list)
    fresh: bool = False
    check: bool = False
    check_steps: int = 6
    target_efficiency: float = 0.8
    profile: ProfileOptions = field(default_factory=ProfileOptions)
    cache: str | None = None


@dataclass
class AdviseResult:
    out_dir: Path
    report: Path
    files: list[Path]
    profile_cached: bool
    plans: list[dict[str, Any]]
    run: dict[str, Any] | None


def _writable(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out_dir}: cannot create the folder: {e.strerror or e}") \
            from None
    if not os.access(out_dir, os.W_OK):
        raise UsageError(f"--out {out_dir}: the folder is not writable")


def check_run(spec: WorkloadSpec, rec: dict, steps: int, progress=None) -> dict:
    """A short real run of the recommended setup on this machine (2 workers, loopback)."""
    from scalelab.runner import run_training
    from scalelab.runner.config import RunConfig

    arch = "ps" if rec.get("architecture") == "ps" else "allreduce"
    ps = min(max(1, int(rec.get("num_ps") or 1)), 2) if arch == "ps" else None
    cfg = RunConfig(workload=spec, workers=2, ps=ps, architecture=arch,
                    batch_size=int(rec["batch_size"]), steps=steps, warmup_steps=1)
    return run_training(cfg, progress=progress)


def advise(spec: WorkloadSpec, options: AdviseOptions, progress=None) -> AdviseResult:
    from scalelab.plan import PlanOptions, load_cluster, load_profile, plan
    from scalelab.report import write_report

    say = progress or (lambda text: None)
    out = Path(options.out_dir)
    _writable(out)
    clusters = [(Path(c).stem, load_cluster(c)) for c in options.clusters]
    spec.build_model(seed=None)  # a bad model fails now, not after a profile
    say("profiling (or reading the cached profile)")
    prof, hit, _ = cached_profile(spec, options.profile, options.fresh,
                                  Path(options.cache) if options.cache else None,
                                  progress=say)
    profile_path = write_json(out / "profile.json", "profile", prof)
    if not clusters:
        mine = this_machine_cluster(prof)
        if mine is not None:
            clusters.append(("this-machine", mine))
        clusters += [(p.stem, load_cluster(p)) for p in default_clusters()]
    if not clusters:
        raise UsageError("no cluster to plan for: give --cluster FILE")
    files = [profile_path]
    plans = []
    source = load_profile(profile_path)
    for name, cluster in clusters:
        say(f"planning for {name}")
        p = plan(source, cluster, PlanOptions(target_efficiency=options.target_efficiency))
        data = p.to_dict()
        data["inputs"]["cluster_name"] = name
        files.append(write_json(out / f"plan-{name}.json", "plan", data))
        plans.append(data)
    run = None
    if options.check:
        rec = dict(plans[0]["recommendation"])
        say("checking the recommended setup with a short real run")
        run = check_run(spec, rec, options.check_steps)
        files.append(write_json(out / "run-check.json", "run", run))
    say("writing the report")
    report = write_report(files, out / "report.html")
    return AdviseResult(out, report, files, hit, plans, run)
