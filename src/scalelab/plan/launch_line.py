"""The command that runs a plan's recommendation: torchrun and ``scalelab run``, as node 0
would type it (:func:`launch_command`)."""

from __future__ import annotations

import scalelab.plan.layout_choice as layout_choice
from scalelab.algorithm_names import run_name
from scalelab.plan.cluster import Cluster
from scalelab.plan.inputs import PlanInput
from scalelab.text import server_hosts
from scalelab.theory import topology


def launch_command(inp: PlanInput, cluster: Cluster, architecture: str, gpus: int,
                   num_ps: int, batch: int, servers_per_node: tuple[int, ...] = (),
                   algorithm: str | None = None,
                   flat_samples_per_s: float | None = None, layout: str = "ddp",
                   accumulation_steps: int = 1, recompute: str = "none") -> str:
    """torchrun + ``scalelab run`` for the recommendation, as node 0 would type it; with
    colocated servers, which nodes host them; with a computation configuration other than
    PyTorch's defaults, ``--algorithm`` so that the run trains in it; a sharded ``layout``
    (zero1/2/3) runs ``--architecture fsdp --zero N``; gradient accumulation and
    recomputation run as ``--accumulation-steps K`` and ``--recompute full``. ``scalelab run`` has
    no hierarchical mode: a hierarchical recommendation runs DDP's all-reduce, and the
    command says so, with that run's predicted throughput (``flat_samples_per_s``)."""
    model = inp.model or "MODEL"
    nodes = -(-gpus // cluster.gpus_per_node)
    per_node = min(gpus, cluster.gpus_per_node)
    shape = ",".join(str(x) for x in inp.input_shape)
    args = f"--batch-size {batch} --input-shape {shape} --num-classes {inp.num_classes}"
    run_algorithm = run_name(algorithm)
    if run_algorithm:
        args += f" --algorithm {run_algorithm}"
    if accumulation_steps > 1:
        args += f" --accumulation-steps {accumulation_steps}"
    if recompute != "none":
        args += f" --recompute {recompute}"
    if gpus == 1:
        return f"scalelab run {model} --workers 1 {args}"
    if architecture != "ps":
        cmd = (f"torchrun --nnodes {nodes} --nproc-per-node {per_node} --node-rank 0 "
               f"--master-addr HOST0 --master-port 29500 -m scalelab run {model} "
               f"--workers {gpus} --architecture {layout_choice.run_architecture(layout)} "
               f"{args} "
               "--launcher torchrun")
        if architecture == "hierarchical":
            rate = (f", predicted {flat_samples_per_s:,.0f} samples/s"
                    if flat_samples_per_s else "")
            cmd += (" (scalelab run has no hierarchical mode: this runs DDP's flat "
                    f"all-reduce{rate})")
        return cmd
    colocate = cluster.ps_placement == "colocated"
    if colocate:
        hosts = servers_per_node or topology.servers_per_node(num_ps, nodes)
        return (f"torchrun --nnodes {nodes} --nproc-per-node {per_node + hosts[0]} "
                f"--node-rank 0 --master-addr HOST0 --master-port 29500 -m scalelab run "
                f"{model} --workers {gpus} --ps {num_ps} --ps-placement colocated {args} "
                f"--launcher torchrun (servers on the nodes' CPUs: {server_hosts(hosts)}; "
                "node j starts its GPUs' workers plus its servers"
                + ("" if num_ps == gpus else
                   f"; under torchrun scalelab run places colocated servers one beside each "
                   f"worker only (--ps {gpus}): this layout runs on emulated hosts, "
                   "scalelab validate --grid \"ps_placement=colocated ...\"") + ")")
    return (f"torchrun --nnodes {nodes + 1} --nproc-per-node {per_node} "
            f"--node-rank 0 --master-addr HOST0 --master-port 29500 -m scalelab run {model} "
            f"--workers {gpus} --ps {num_ps} {args} --launcher torchrun"
            f" (and the {num_ps} servers' ranks on their own machines)")
