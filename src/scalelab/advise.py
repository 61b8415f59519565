"""The main job: one command from a model to advice, with pictures.

``advise`` profiles the model on this device (or reuses a cached profile measured with the
same workload, device, torch version and profiling options), plans data-parallel training
for the given clusters (without one: for this machine when it has several GPUs, and for the
example clusters shipped in the package, :data:`EXAMPLES_DIR`), optionally checks the
model on this machine (``check``: the recommendation's architecture and batch at the
largest worker count this machine hosts, predicted and run), and writes ``report.html``
beside the JSON files.

A profile measured while the machine was busy is used for this advice, flagged, and not
cached: the next ``advise`` measures again.
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
from scalelab.paths import (  # noqa: F401 - the cache and the examples, kept importable here
    EXAMPLES_DIR,
    cache_dir,
    default_clusters,
    example_names,
    resolve_cluster,
    resolve_example,
)
from scalelab.profiler import ProfileOptions, run_profile
from scalelab.results import read_json, write_json
from scalelab.workload import WorkloadSpec


def profile_identity(spec: WorkloadSpec, options: ProfileOptions) -> dict[str, Any]:
    """Everything that changes a profile: the workload, the device measured (its index and
    name), torch, and every profiling option (batches, budget, data, algorithms, steps)."""
    dev = options.torch_device
    data = options.data if options.data == "synthetic" else str(Path(options.data).resolve())
    return {
        "workload": spec.to_dict(), "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "batch_sizes": options.batch_sizes, "memory_budget_bytes": options.memory_budget_bytes,
        "max_batch": options.max_batch, "data": data, "algorithms": options.algorithms,
        "warmup": options.warmup, "timed_steps": options.timed_steps,
        "max_trials": options.max_trials, "seed": options.seed,
    }


def profile_key(spec: WorkloadSpec, options: ProfileOptions) -> str:
    """The cache file's name: the model and a digest of :func:`profile_identity`."""
    ident = json.dumps(profile_identity(spec, options), sort_keys=True)
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return f"{spec.model.replace(':', '_').replace('/', '_')}-{digest}"


def profile_busy(profile: dict[str, Any]) -> bool:
    """Whether a profile says the machine was busy while it was measured."""
    env = profile.get("environment")
    return bool(profile.get("machine_busy") or profile.get("busy")
                or (isinstance(env, dict) and env.get("busy")))


@dataclass(frozen=True)
class CachedProfile:
    """A profile and how it was obtained."""

    profile: dict[str, Any]
    """The profile.json content."""
    cached: bool
    """Read from the cache (True) or measured now (False)."""
    path: Path
    """The cache entry's path (written only for a profile measured on a quiet machine)."""
    note: str | None = None
    """What the reader should know about the cache (a busy profile not stored, ...)."""


def cached_profile(spec: WorkloadSpec, options: ProfileOptions, fresh: bool = False,
                   directory: Path | None = None, progress=None) -> CachedProfile:
    """The profile of ``spec`` under ``options``, from the cache unless ``fresh``.

    A cache entry measured on a busy machine is never reused, and a profile measured on a
    busy machine is never stored: its step times say more about the other jobs than about
    the model."""
    path = (directory or cache_dir()) / "profiles" / f"{profile_key(spec, options)}.json"
    note = None
    if not fresh and path.exists():
        try:
            prof = read_json(path, "profile")
        except UsageError:
            prof = None  # a damaged cache entry is measured again
        if prof is not None and not profile_busy(prof):
            return CachedProfile(prof, True, path)
        if prof is not None:
            note = "the cached profile was measured on a busy machine: measured again"
    prof = {"schema": "scalelab.profile/1", **run_profile(spec, options, progress=progress)}
    if profile_busy(prof):
        return CachedProfile(prof, False, path, "measured on a busy machine: not cached, "
                             "the next advise measures again")
    try:
        write_json(path, "profile", prof)
    except UsageError:
        pass  # an unwritable cache costs a re-measurement next time, nothing else
    return CachedProfile(prof, False, path, note)


def this_machine_cluster(profile: dict):
    """This machine as a cluster, when it has several GPUs (a single device has no plan).

    The device is matched in the catalog by the name CUDA reports, so the plan uses its
    device link (NVLink on SXM parts), host link and platform; an unmatched GPU leaves the
    links unknown and the plan says what it assumed.
    """
    from scalelab import hardware
    from scalelab.plan import Cluster

    if not str(profile.get("device", "")).startswith("cuda") or torch.cuda.device_count() < 2:
        return None
    matched = hardware.match_device(torch.cuda.get_device_name(0))
    return Cluster(nodes=1, gpus_per_node=torch.cuda.device_count(), network="10GbE",
                   architecture="allreduce", device=matched.name if matched else None)


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
    report: Path | None
    files: list[Path]
    profile_cached: bool
    plans: list[dict[str, Any]]
    check: dict[str, Any] | None
    """check.json's content (a ``scalelab.validation`` file with a ``check`` section)."""
    profile_note: str | None = None
    """What the reader should know about the profile's cache entry."""
    warnings: list[str] = field(default_factory=list)
    """Every warning the report shows: the profile's, then each plan's (named)."""
    layout_advice: dict[str, Any] | None = None
    """Set when the model fits no batch of the profiling device: the layout, devices and
    batch that fit, from its memory alone (no profile, plans or report then)."""


def too_large_advice(spec: WorkloadSpec, options: ProfileOptions) -> dict[str, Any] | None:
    """The layout, devices of the profiling budget and batch on which a model that fits no
    batch of one such device fits (:func:`scalelab.plan.layout_choice.fewest_devices`),
    counted on meta tensors; None when the count says one device holds batch 1 without
    sharding (the measurement, not the memory, refused it) or the model cannot be counted."""
    from scalelab.plan.layout_choice import fewest_devices, run_architecture
    from scalelab.plan.layouts import sizes_from_components
    from scalelab.profiler.memory import try_memory_components
    from scalelab.profiler.profile import default_budget

    comp = try_memory_components(spec)
    if not comp:
        return None
    budget = options.memory_budget_bytes or default_budget(options.torch_device)
    fit = fewest_devices(sizes_from_components(comp), float(budget))
    if fit is None or fit.layout == "ddp":
        return None
    shape = ",".join(str(x) for x in spec.input_shape)
    launch = (f"scalelab run {spec.model} --workers {fit.gpus} --architecture "
              f"{run_architecture(fit.layout)} --batch-size {fit.batch_size} --input-shape "
              f"{shape} --num-classes {spec.num_classes}")
    return {**fit.to_dict(), "device": options.device, "memory_budget_bytes": budget,
            "launch": launch}


def _writable(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out_dir}: cannot create the folder: {e.strerror or e}") \
            from None
    if not os.access(out_dir, os.W_OK):
        raise UsageError(f"--out {out_dir}: the folder is not writable")


def collect_warnings(profile: dict[str, Any], plans: list[dict[str, Any]]) -> list[str]:
    """The profile's warnings, then each plan's, prefixed with its cluster's name."""
    out = [f"profile: {w}" for w in profile.get("warnings", [])]
    for p in plans:
        name = p["inputs"].get("cluster_name", "plan")
        out += [f"{name}: {w}" for w in p.get("warnings", [])]
    return out


def host_capacity(device: torch.device) -> tuple[int, str]:
    """How many training processes this machine hosts: one per GPU, else one per core."""
    if device.type == "cuda":
        n = torch.cuda.device_count()
        return n, f"{n} GPU" + ("" if n == 1 else "s")
    from scalelab.runner.launch import cpu_count

    n = cpu_count()
    return n, f"{n} CPU core" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class CheckSetup:
    """What ``advise --check`` runs: the recommendation, scaled to this machine."""

    architecture: str
    """ps | allreduce (a hierarchical recommendation is all-reduce on one host)."""
    workers: int
    """W: the recommended device count, capped at what this machine hosts."""
    ps: int
    """Parameter servers run (0 for all-reduce)."""
    batch_size: int
    """The recommended per-device batch."""
    hosts: int
    """Processes this machine hosts (cores or GPUs)."""
    why: str
    """One sentence: how W and the servers were chosen."""

    def __post_init__(self):
        if self.workers < 1 or self.batch_size < 1:
            raise ValueError(f"check needs workers >= 1 and batch >= 1, got {self.workers}, "
                             f"{self.batch_size}")

    def config(self) -> dict[str, Any]:
        """The case as the experiment's grid keys, on loopback."""
        return {"architecture": self.architecture, "workers": self.workers,
                "ps": self.ps or None, "batch_size": self.batch_size, "rate": None}


def check_setup(rec: dict[str, Any], hosts: int, hosts_text: str) -> CheckSetup:
    """The recommended architecture and batch at the largest worker count this machine
    hosts: one process per core (or GPU), servers included, never more workers than the
    recommendation's devices."""
    gpus = int(rec["gpus"])
    if rec.get("architecture") == "ps":
        ps = max(1, min(int(rec.get("num_ps") or 1), hosts // 2))
        workers = max(1, min(gpus, hosts - ps))
        arch = "ps"
    else:
        ps, workers, arch = 0, max(1, min(gpus, hosts)), "allreduce"
    shown = f"{workers} worker" + ("" if workers == 1 else "s")
    if ps:
        shown += f" and {ps} server" + ("" if ps == 1 else "s")
    why = (f"{shown}: the recommended {gpus} device" + ("" if gpus == 1 else "s")
           + f" capped at what this machine hosts ({hosts_text}, one process each)")
    return CheckSetup(arch, workers, ps, int(rec["batch_size"]), hosts, why)


def check_recommendation(spec: WorkloadSpec, plan_data: dict[str, Any], device: torch.device,
                         steps: int, say=None) -> dict[str, Any]:
    """Run the recommendation of ``plan_data`` scaled to this machine, on loopback, beside
    the step model's prediction for exactly that run (compute, contention and the loopback
    link measured here, as a validation case is). A check of the model on this machine, not
    a validation of the cluster plan. Returns a validation dict with a ``check`` section."""
    from scalelab.experiment.validate import ValidationOptions, run_cases

    rec = plan_data["recommendation"]
    setup = check_setup(rec, *host_capacity(device))
    # a run's steps include its warm-up (runner.report drops the first warmup_steps)
    opts = ValidationOptions(steps=steps + 1, warmup_steps=1)
    result = run_cases(spec, [setup.config()], opts, say=say).to_dict()
    case = result["cases"][0]
    name = plan_data["inputs"].get("cluster_name", "the cluster")
    result["check"] = {
        "label": f"a check of the model on this machine, not a validation of the plan for "
                 f"{name}",
        "cluster_name": name,
        "recommended": {k: rec.get(k) for k in ("architecture", "gpus", "num_ps",
                                                "batch_size", "algorithm")},
        "ran": {**setup.config(), "rate": "loopback", "computation": "default"},
        "why": setup.why,
        "predicted_samples_per_s": case["predicted_samples_per_s"],
        "measured_samples_per_s": case["measured_samples_per_s"],
        "predicted_step_s": case["predicted_step_s"],
        "measured_step_s": case["measured_step_s"],
        "error": case["error"],
    }
    return result


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare` checked before any work: the clusters named and the options."""

    clusters: list[tuple[str, Any]]
    plan_options: Any


def prepare(spec: WorkloadSpec, options: AdviseOptions) -> Prepared:
    """Every input checked before any work starts (a bad option costs no profiling): the
    plan's options (target efficiency), the output folder, the clusters, the model."""
    from scalelab.plan import PlanOptions, load_cluster

    plan_options = PlanOptions(target_efficiency=options.target_efficiency)
    if options.check and spec.tokens and spec.built_in:
        raise UsageError("--check runs a data-parallel recommendation here; a language "
                         "model's plan is a parallel layout: run it with the launch line "
                         "(scalelab run MODEL --seq-len S ...)")
    clusters = [(Path(c).stem, load_cluster(resolve_cluster(c))) for c in options.clusters]
    spec.build_model(seed=None)  # a bad model fails now, not after a profile
    _writable(Path(options.out_dir))  # created last: a refused input leaves no folder
    return Prepared(clusters, plan_options)


def advise(spec: WorkloadSpec, options: AdviseOptions, progress=None,
           prepared: Prepared | None = None) -> AdviseResult:
    from scalelab.plan import load_cluster, load_profile, plan
    from scalelab.report import write_report

    say = progress or (lambda text: None)
    out = Path(options.out_dir)
    ready = prepared or prepare(spec, options)
    clusters = list(ready.clusters)
    say("profiling (or reading the cached profile)")
    try:
        got = cached_profile(spec, options.profile, options.fresh,
                             Path(options.cache) if options.cache else None, progress=say)
    except UsageError as e:  # no batch fits one device: the layout that fits, if any
        fit = too_large_advice(spec, options.profile)
        if fit is None:
            raise
        return AdviseResult(out, None, [], False, [], None, None, [str(e)], layout_advice=fit)
    profile_path = write_json(out / "profile.json", "profile", got.profile)
    if not clusters:
        mine = this_machine_cluster(got.profile)
        if mine is not None:
            clusters.append(("this-machine", mine))
        clusters += [(p.stem, load_cluster(p)) for p in default_clusters()]
    if not clusters:
        raise UsageError("no cluster to plan for: give --cluster FILE")
    files = [profile_path]
    plans = []
    lm = spec.tokens and spec.built_in  # the full model's layouts, planned from its shape
    source = None if lm else load_profile(profile_path)
    for name, cluster in clusters:
        say(f"planning for {name}")
        if lm:
            from scalelab.plan.lm.from_profile import plan_from_profile

            data = plan_from_profile(got.profile, cluster, name)
        else:
            data = plan(source, cluster, ready.plan_options).to_dict()
            data["inputs"]["cluster_name"] = name
        files.append(write_json(out / f"plan-{name}.json", "plan", data))
        plans.append(data)
    check = None
    if options.check:
        say("checking the model on this machine with a short real run")
        check = check_recommendation(spec, plans[0], options.profile.torch_device,
                                     options.check_steps, say)
        files.append(write_json(out / "check.json", "validation", check))
    say("writing the report")
    report = write_report(files, out / "report.html")
    return AdviseResult(out, report, files, got.cached, plans, check, got.note,
                        collect_warnings(got.profile, plans))
