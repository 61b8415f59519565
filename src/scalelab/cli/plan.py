"""``scalelab plan``: predict data-parallel training at every scale and recommend a setup."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from scalelab.cli import HelpFormatter
from scalelab.cli._common import console, err_console, positive_int
from scalelab.cli._plan_lm import LM_EPILOG, add_lm_options, is_lm, lm_only_options, run_lm

EPILOG = """examples (--cluster and --workload take a file or a shipped example's name):
  scalelab plan --profile profile.json --cluster cluster-4x8-a100-100gbe
  scalelab plan --workload workload.toml --cluster cluster-16x-10gbe-ps
  scalelab plan --workload workload.toml --nodes 8 --network 10GbE --ps auto \\
      --plot plan.png
  scalelab plan --profile profile.json --device H100-SXM --nodes 4 --gpus-per-node 8 \\
      --network IB-NDR --architecture allreduce --target-efficiency 0.9 --json

Command-line options override the cluster file, which overrides the defaults.
A named network counts at its per-direction payload rate (scalelab hardware show NAME);
--network-gbps X is X Gb/s of payload (1 Gb/s = 125e6 bytes/s).
"""

PLOT_NETWORKS = ("1GbE", "10GbE", "100GbE")


def _fraction(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _ps(text: str):
    if text == "auto":
        return "auto"
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ps takes 'auto' or an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"--ps must be >= 1, got {v}")
    return v


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="predict speedup at every scale and recommend a configuration",
        description="Amdahl's-law model of data parallelism from one device's profile: "
                    "sweep over device counts for parameter servers, ring and hierarchical "
                    "all-reduce, with the bottleneck of each, and recommendations with reasons.",
        epilog=EPILOG + "\n" + LM_EPILOG, formatter_class=HelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--profile", metavar="FILE", help="profile.json from scalelab profile")
    src.add_argument("--workload", metavar="FILE",
                     help="workload.toml: step_s measured at batch_size, model or param_bytes")
    src.add_argument("--model", metavar="NAME",
                     help="a language model: a preset (llama3-70b, gpt2, ...) or hf:PATH")
    p.add_argument("--cluster", metavar="FILE", help="cluster.toml (see examples/)")
    p.add_argument("--nodes", type=_fraction_int, metavar="N")
    p.add_argument("--gpus-per-node", type=_fraction_int, metavar="N")
    p.add_argument("--device", metavar="NAME", help="target device (scalelab hardware list)")
    p.add_argument("--intra-node", metavar="LINK", help="nvlink2|nvlink3|nvlink4|pcie3|pcie4|pcie5")
    p.add_argument("--intra-node-gbps", type=_fraction, metavar="X")
    net = p.add_mutually_exclusive_group()
    net.add_argument("--network", metavar="NAME", help="per-node NIC: 10GbE, 100GbE, IB-FDR, ...")
    net.add_argument("--network-gbps", type=_fraction, metavar="X",
                     help="per-node NIC payload rate in Gb/s")
    psn = p.add_mutually_exclusive_group()
    psn.add_argument("--ps-network", metavar="NAME", help="dedicated servers' NIC")
    psn.add_argument("--ps-network-gbps", type=_fraction, metavar="X")
    p.add_argument("--architecture", choices=["ps", "allreduce", "hierarchical"])
    p.add_argument("--ps", type=_ps, metavar="auto|N", help="parameter servers (default auto)")
    p.add_argument("--ps-placement", choices=["dedicated", "colocated"])
    p.add_argument("--ps-partition", choices=["balanced", "tensor"],
                   help="even chunks (balanced) or whole tensors placed greedily (tensor)")
    p.add_argument("--local-aggregation", action=argparse.BooleanOptionalAction, default=None,
                   help="ps: reduce inside each node before pushing (default on)")
    p.add_argument("--full-duplex", action=argparse.BooleanOptionalAction, default=None,
                   help="ps: pipelined pushes and pulls (default push-then-pull)")
    p.add_argument("--overlap", type=_fraction, metavar="0..1",
                   help="fraction of the exchange hidden behind backward")
    p.add_argument("--latency-s", type=_fraction, metavar="S", help="per-message latency")
    p.add_argument("--price-per-gpu-hour", type=_fraction, metavar="X")
    p.add_argument("--gpus-per-nic", type=_fraction_int, metavar="N",
                   help="devices sharing one NIC (default: the --platform's, e.g. 1 on "
                        "DGX A100/H100; else one NIC per node)")
    p.add_argument("--platform", metavar="NAME",
                   help="the node the devices come in, for its links: dgx (the device's DGX, "
                        "e.g. 8 NICs on a DGX A100) or its name (default: none, one NIC "
                        "per node)")
    hl = p.add_mutually_exclusive_group()
    hl.add_argument("--host-link", metavar="LINK",
                    help="each device's link to the host CPU: pcie3|pcie4|pcie5 "
                         "(default: the device's)")
    hl.add_argument("--host-link-gbps", type=_fraction, metavar="X")
    p.add_argument("--gpus-per-host-link", type=_fraction_int, metavar="N",
                   help="devices behind one PCIe switch uplink (default 1)")
    p.add_argument("--grad-dtype", choices=["fp32", "bf16", "fp16"],
                   help="precision of the exchanged gradients (default fp32)")
    p.add_argument("--accumulation-steps", type=positive_int, metavar="K",
                   help="micro-batches per exchange (default 1; with --global-batch: chosen)")
    p.add_argument("--global-batch", type=positive_int, metavar="G",
                   help="samples per optimizer step over all devices, kept exactly: "
                        "micro-batch x accumulation steps x devices (micro-batch, "
                        "accumulation, layout and recomputation chosen to fit)")
    p.add_argument("--recompute", choices=["none", "full"],
                   help="activation checkpointing per block (default: weighed, its extra "
                        "forward against the batch it frees; run --recompute)")
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16", "fp8"],
                   help="precision the target computes in (default: PyTorch's default on "
                        "the device, TF32 convolutions on Ampere and later)")
    p.add_argument("--cpu-cores-per-node", type=_fraction_int, metavar="N",
                   help="host cores per node for input loaders (default: the platform's)")
    p.add_argument("--target-efficiency", type=_fraction, default=0.8, metavar="E",
                   help="efficiency to keep, in (0, 1] (default 0.8)")
    p.add_argument("--max-gpus", type=positive_int, metavar="N",
                   help="largest device count in the sweep (default: the cluster's size)")
    p.add_argument("--batch-size", type=positive_int, metavar="B",
                   help="per-device batch (default: the profile's recommendation)")
    p.add_argument("--layout", choices=["ddp", "zero1", "zero2", "zero3"],
                   help="model-state layout (default: plain DDP where it fits the device, "
                        "else the ZeRO level that fits; run --architecture fsdp --zero N)")
    p.add_argument("--loader-workers", type=int, metavar="L",
                   help="input loader processes per device (default: as many as needed)")
    p.add_argument("--mfu", type=_fraction, default=None, metavar="E",
                   help="assumed efficiency on the target when the profiled device's peak is "
                        "unknown (default 0.4)")
    p.add_argument("--calibration", metavar="FILE", help="scalelab.calibration/1 model params")
    p.add_argument("--out", default="plan.json", metavar="FILE", help="(default plan.json)")
    p.add_argument("--plot", metavar="FILE.png",
                   help="speedup and efficiency vs devices per architecture and network")
    p.add_argument("--json", action="store_true", help="print the plan as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="print only the recommendation line")
    add_lm_options(p)
    p.set_defaults(func=run)


def _fraction_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def cluster_overrides(args) -> dict:
    """The cluster settings the command line gives (None: not given)."""
    return {
        "nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "device": args.device,
        "intra_node": args.intra_node, "intra_node_gbps": args.intra_node_gbps,
        "network": args.network, "network_gbps": args.network_gbps,
        "ps_network": args.ps_network, "ps_network_gbps": args.ps_network_gbps,
        "architecture": args.architecture, "ps": args.ps, "ps_placement": args.ps_placement,
        "ps_partition": args.ps_partition, "local_aggregation": args.local_aggregation,
        "full_duplex": args.full_duplex, "overlap": args.overlap, "latency_s": args.latency_s,
        "price_per_gpu_hour": args.price_per_gpu_hour, "gpus_per_nic": args.gpus_per_nic,
        "host_link": args.host_link, "host_link_gbps": args.host_link_gbps,
        "gpus_per_host_link": args.gpus_per_host_link, "grad_dtype": args.grad_dtype,
        "accumulation_steps": args.accumulation_steps, "precision": args.precision,
        "cpu_cores_per_node": args.cpu_cores_per_node, "platform": args.platform,
    }


def build_plan(args):
    """The plan the command line asks for (a :class:`scalelab.plan.Plan`)."""
    from scalelab import plan as planner
    from scalelab.paths import resolve_example

    inp = (planner.load_profile(args.profile) if args.profile
           else planner.load_workload(resolve_example(args.workload, "--workload")))
    cluster = planner.load_cluster(resolve_example(args.cluster) if args.cluster else None,
                                   cluster_overrides(args))
    cal = planner.load_calibration_file(args.calibration) if args.calibration else None
    options = planner.PlanOptions(
        target_efficiency=args.target_efficiency, max_gpus=args.max_gpus,
        batch_size=args.batch_size, loader_workers=args.loader_workers,
        params=cal.params if cal else None, band=cal.band if cal else None,
        calibration_model=cal.model if cal else None, precision=args.precision,
        layout=args.layout, global_batch=args.global_batch, recompute=args.recompute,
        **({"default_mfu": args.mfu} if args.mfu is not None else {}),
    )
    return inp, cluster, planner.plan(inp, cluster, options)


def _table(plan) -> Table:
    from scalelab import plan as planner
    from scalelab.plan.advice import floor2

    rows = plan.sweep
    max_g = max(r.gpus for r in rows)
    keep = {1, max_g} | {2 ** k for k in range(20)} | {plan.recommendation.gpus}
    t = Table(title=f"predicted data-parallel scaling (per-device batch "
                    f"{plan.recommendation.batch_size})" + (" [estimate]" if plan.estimate else ""))
    for col in ("architecture", "GPUs", "nodes", "PS", "compute", "comm", "io", "step",
                "samples/s", "speedup", "eff", "bottleneck"):
        t.add_column(col, justify="left" if col in ("architecture", "bottleneck") else "right")
    last = None
    for r in rows:
        if r.gpus not in keep:
            continue
        if last is not None and r.architecture != last:
            t.add_section()
        last = r.architecture
        t.add_row(r.architecture, str(r.gpus), str(r.nodes), str(r.num_ps or "-"),
                  planner.format_s(r.compute_s), planner.format_s(r.comm_s),
                  planner.format_s(r.io_s), planner.format_s(r.step_s),
                  _samples(r), f"{r.speedup:.2f}", floor2(r.efficiency),
                  r.bottleneck)
    return t


def _samples(r) -> str:
    """samples/s, with its band's range when the plan has one."""
    if r.samples_per_s_low is None:
        return f"{r.samples_per_s:,.0f}"
    return f"{r.samples_per_s:,.0f} ({r.samples_per_s_low:,.0f}-{r.samples_per_s_high:,.0f})"


def _summary(plan) -> str:
    """The recommendation in one paragraph: what to use, what it gives, the alternatives
    (the same line the report's headline shows: :func:`scalelab.plan.story.headline`)."""
    from scalelab.plan.story import headline

    return headline(plan.to_dict())


def plot_plan(plan, inp, cluster, path) -> None:
    """Speedup and efficiency against device count, per architecture and network."""
    from scalelab import plan as planner
    from scalelab.report.figures import plot_plan as draw

    compute_s = plan.inputs["compute_s"]
    work = planner.StepWorkload(inp.param_bytes, compute_s, plan.inputs["io_s"],
                                inp.tensor_bytes)
    counts = sorted({r.gpus for r in plan.sweep})
    batch = plan.recommendation.batch_size
    archs = plan.inputs["options"]["architectures"]
    target = plan.inputs["options"]["target_efficiency"]
    series = {cluster.network_label(): list(plan.sweep)}
    for name in PLOT_NETWORKS:
        if name == cluster.network:
            continue
        series[name] = planner.network_sweep(work, cluster, [name], counts, batch, archs,
                                             plan.params, target)
    title = f"{inp.model or 'workload'}: batch {batch}/device, T_C {compute_s * 1e3:.1f} ms"
    draw(series, archs, plan.inputs["options"]["max_gpus"], target,
         title + (" (estimate)" if plan.estimate else ""), path)


def run(args) -> int:
    from scalelab.results import write_json

    if is_lm(args):
        return run_lm(args, cluster_overrides(args))
    lm_only_options(args)
    inp, cluster, plan = build_plan(args)
    data = plan.to_dict()
    write_json(args.out, "plan", data)
    if args.plot:
        plot_plan(plan, inp, cluster, args.plot)
    if args.json:
        print(json.dumps(_nulls(data), indent=2))
        return 0
    if args.quiet:
        console.print(_summary(plan), soft_wrap=True)
        return 0
    out = console if console.is_terminal else Console(width=120)
    out.print(_table(plan))
    out.print(_summary(plan), soft_wrap=True, highlight=False)
    for reason in plan.recommendation.reasons:
        out.print(f"  - {reason}", soft_wrap=True, highlight=False)
    if plan.recommendation.launch:
        out.print(f"launch: {plan.recommendation.launch}", soft_wrap=True, highlight=False)
    for w in plan.warnings:
        err_console.print(f"warning: {w}", soft_wrap=True, highlight=False)
    console.print(f"wrote {args.out}" + (f" and {args.plot}" if args.plot else ""))
    return 0


def _nulls(obj):
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _nulls(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nulls(v) for v in obj]
    return obj
