"""The cluster's topology: every byte of the exchange on the link it crosses."""

from __future__ import annotations

import pytest

from scalelab.errors import UsageError
from scalelab.plan import Cluster, PlanOptions, StepSetup, StepWorkload, plan, predict_step
from scalelab.plan.inputs import workload_from_dict
from scalelab.theory import comm, topology

MB = 1_000_000
RESNET50_BYTES = 102_228_128  # 25,557,032 fp32 parameters


def _resnet50(step_s=0.292, batch=64):
    return workload_from_dict({"param_bytes": RESNET50_BYTES, "batch_size": batch,
                               "step_s": step_s})


def test_ps_on_the_host_cpu_of_one_node_is_charged_to_pcie_not_the_nic():
    # 1 node x 8 GPUs, one parameter server on the host CPU, every GPU a sender.
    c = Cluster(nodes=1, gpus_per_node=8, architecture="ps", ps=1, ps_placement="colocated",
                local_aggregation=False, intra_node="pcie3", host_link="pcie3",
                network_gbps=10)
    p = plan(_resnet50(), c, PlanOptions(architectures=("ps",)))
    row = next(r for r in p.sweep if r.gpus == 8)
    # push S_p over each GPU's own PCIe 3 x16 (15.75 GB/s), then pull: 2 x 6.49 ms
    assert row.comm_s == pytest.approx(2 * RESNET50_BYTES / 15.75e9, rel=1e-9)
    assert row.bottleneck == "compute"
    assert row.speedup == pytest.approx(8 * 0.292 / (0.292 + row.comm_s), rel=1e-9)
    assert row.speedup > 7.5  # published runs of this setup scale almost linearly
    assert row.num_ps == 1
    # the same machine with 1000 Gb/s of NIC changes nothing: no byte crosses the NIC
    fast = plan(_resnet50(), Cluster(**{**c.to_dict(), "network_gbps": 1000}),
                PlanOptions(architectures=("ps",)))
    assert next(r for r in fast.sweep if r.gpus == 8).step_s == pytest.approx(row.step_s)


def test_gpus_sharing_a_pcie_switch_share_its_uplink():
    base = dict(nodes=1, gpus_per_node=8, architecture="ps", ps_placement="colocated",
                local_aggregation=False, intra_node="pcie3", host_link="pcie3",
                network_gbps=10)
    one = plan(_resnet50(), Cluster(**base), PlanOptions(architectures=("ps",)))
    two = plan(_resnet50(), Cluster(**base, gpus_per_host_link=2),
               PlanOptions(architectures=("ps",)))
    c1 = next(r for r in one.sweep if r.gpus == 8).comm_s
    c2 = next(r for r in two.sweep if r.gpus == 8).comm_s
    assert c2 == pytest.approx(2 * c1)


def test_topology_with_one_device_per_node_is_the_classic_ps_exchange():
    s, n, b = 100 * MB, 4, 1e9
    for full in (False, True):
        topo = topology.PsTopology(nodes=n, senders_per_node=1, node_nic_Bps=b, colocated=True)
        loads = topology.ps_phase_loads(s, topo, 0.25, 0.25, full_duplex=full)
        ex = comm.ps_exchange(s, n, 0.25, b, b, colocated=True, full_duplex=full,
                              smallest_fraction=0.25)
        assert topology.phase_s(loads) == pytest.approx(ex.push_s)
    topo = topology.PsTopology(nodes=n, senders_per_node=1, node_nic_Bps=b, server_nic_Bps=b)
    loads = topology.ps_phase_loads(s, topo, 0.5, 0.5)
    ex = comm.ps_exchange(s, n, 0.5, b, b)
    assert topology.phase_s(loads) == pytest.approx(ex.push_s)
    assert topology.busiest(loads).link == topology.NIC_IN  # 4 x 50 MB into one server


def test_colocated_servers_across_nodes_split_host_and_nic_traffic():
    # 2 nodes x 4 GPUs, one server per node, no local aggregation: each GPU sends half of
    # S_p to its own node's server (host link only) and half over the node's NIC.
    s = 100 * MB
    st = StepSetup("ps", workers=8, num_ps=2, colocated=True, gpus_per_node=4,
                   local_aggregation=False, worker_bandwidth_Bps=1e9,
                   intra_bandwidth_Bps=100e9, host_bandwidth_Bps=10e9)
    p = predict_step(StepWorkload(s, 1.0), st)
    out = 4 * s * (1 - 0.5)  # 4 senders x S_p/2 leave the node
    inbound = (8 - 4) * s * 0.5  # 4 remote senders x S_p/2 arrive
    assert p.push_s == pytest.approx(max(out, inbound) / 1e9)
    assert p.comm_s == pytest.approx(2 * p.push_s)
    assert p.bottleneck == "network-worker"  # 0.4 s of NIC traffic on 1 s of compute


def test_nics_per_node_are_used_together():
    s = 100 * MB
    kw = dict(workers=16, gpus_per_node=8, worker_bandwidth_Bps=25e9 / 8 * 8,
              intra_bandwidth_Bps=300e9)
    one = predict_step(StepWorkload(s, 1.0), StepSetup("allreduce", **kw))
    eight = predict_step(StepWorkload(s, 1.0), StepSetup("allreduce", gpus_per_nic=1, **kw))
    assert eight.comm_s == pytest.approx(one.comm_s / 8)
    dgx = Cluster(nodes=2, gpus_per_node=8, device="A100-SXM-80GB", network="HDR",
                  platform="dgx")
    assert dgx.nic_sharing()[0] == 1 and "DGX A100" in dgx.nic_sharing()[1]
    # the device alone does not make it a DGX: one NIC per node unless told more
    assert Cluster(nodes=2, gpus_per_node=8, device="A100-SXM-80GB",
                   network="HDR").nic_sharing()[0] == 8
    assert Cluster(nodes=2, gpus_per_node=8, network="HDR").nic_sharing()[0] == 8


def test_gradient_precision_and_accumulation():
    inp = workload_from_dict({"param_bytes": 400 * MB, "batch_size": 32, "step_s": 0.1})
    base = dict(nodes=8, network_gbps=10, architecture="allreduce", overlap=0.0)
    fp32 = plan(inp, Cluster(**base), PlanOptions(architectures=("allreduce",)))
    bf16 = plan(inp, Cluster(**base, grad_dtype="bf16"),
                PlanOptions(architectures=("allreduce",)))
    r32 = next(r for r in fp32.sweep if r.gpus == 8)
    r16 = next(r for r in bf16.sweep if r.gpus == 8)
    assert r16.comm_s == pytest.approx(r32.comm_s / 2)
    acc = plan(inp, Cluster(**base, accumulation_steps=4),
               PlanOptions(architectures=("allreduce",)))
    r4 = next(r for r in acc.sweep if r.gpus == 8)
    assert r4.compute_s == pytest.approx(0.4)  # 4 micro-batches per exchange
    assert r4.comm_s == pytest.approx(r32.comm_s)  # one exchange
    assert r4.samples_per_s == pytest.approx(8 * 4 * 32 / (0.4 + r4.comm_s))
    with pytest.raises(UsageError, match="grad_dtype"):
        Cluster(network="10GbE", grad_dtype="int8")


def test_ddp_bucket_overlap_is_derived():
    # 100 MB in 25 MiB buckets: 4 buckets; backward 0.2 s
    c = comm.ddp_exposed_s(0.08, 0.2, 100 * MB)  # each bucket 20 ms < 50 ms gap
    assert c == pytest.approx(0.02)
    c = comm.ddp_exposed_s(0.4, 0.2, 100 * MB)  # queued: 0.4 - 0.2 * 3/4
    assert c == pytest.approx(0.25)
    assert comm.ddp_exposed_s(0.1, 0.2, 10 * MB) == pytest.approx(0.1)  # one bucket
    assert comm.ddp_exposed_s(0.0, 0.2, 10 * MB) == 0.0


def test_colocated_servers_any_count_on_any_nodes():
    Cluster(nodes=4, gpus_per_node=8, network="10GbE", ps=6, ps_placement="colocated")
    Cluster(nodes=8, gpus_per_node=8, network="10GbE", ps=6, ps_placement="colocated")
    assert topology.servers_per_node(6, 8) == (1, 1, 1, 1, 1, 1, 0, 0)
    assert topology.servers_per_node(6, 4) == (2, 2, 1, 1)
    assert topology.servers_per_node(3, 3) == (1, 1, 1)
    # even chunks: a node's share is its servers over k; a node without one holds nothing
    assert topology.colocated_node_fractions(6, 8, 1 / 6, 1 / 6) == pytest.approx((1 / 6, 0))
    assert topology.colocated_node_fractions(6, 4, 1 / 6, 1 / 6) == \
        pytest.approx((2 / 6, 1 / 6))
    with pytest.raises(ValueError, match=">= 1"):
        topology.servers_per_node(0, 4)


def test_a_server_nodes_nic_carries_its_workers_and_its_servers_traffic():
    # 6 servers on 8 nodes, one sender per node: push out of a node without a server is the
    # whole S_p; a server's node receives 7 x S_p/6 from the others: the busiest direction
    s, topo = 100 * MB, topology.PsTopology(8, 1, 1e9, colocated=True)
    loads = {x.link: x.bytes for x in topology.ps_phase_loads(s, topo, 1 / 6, 0.0)}
    assert loads[topology.NIC_OUT] == pytest.approx(s)
    assert loads[topology.NIC_IN] == pytest.approx(7 * s / 6)
    # pipelined: each NIC direction carries its pushes and the pull replies at once
    # (1 - F) S_p + 7 F S_p, largest on the server's node: 5/6 + 7/6 = 2 S_p
    full = {x.link: x.bytes for x in topology.ps_phase_loads(s, topo, 1 / 6, 0.0, True)}
    assert full[topology.NIC_OUT] == pytest.approx(2 * s)


def test_link_named_and_rated_in_one_file_is_refused(tmp_path):
    from scalelab.plan import load_cluster

    f = tmp_path / "c.toml"
    f.write_text('network = "10GbE"\nnetwork_gbps = 25\n')
    with pytest.raises(UsageError, match="same link"):
        load_cluster(f)


def test_a_node_short_of_cores_is_input_bound_and_says_so():
    # 8 GPUs at T_C = 0.1 s, batch 256, 2 ms decode per sample per core: t_load = 0.512 s,
    # ceil(0.512/0.1) = 6 loaders per GPU, 48 processes; with 32 cores each GPU's loaders
    # get 4 cores: a batch every 0.512/4 = 0.128 s, so 28 ms of input shows per step.
    inp = workload_from_dict({"param_bytes": 100 * MB, "batch_size": 256, "step_s": 0.1,
                              "load_s_per_sample": 0.002})
    c = Cluster(nodes=1, gpus_per_node=8, intra_node="nvlink3", network="100GbE",
                architecture="allreduce", cpu_cores_per_node=32)
    p = plan(inp, c, PlanOptions(architectures=("allreduce",)))
    row = next(r for r in p.sweep if r.gpus == 8)
    assert row.io_s == pytest.approx(0.028)
    assert row.bottleneck == "io"
    one = next(r for r in p.sweep if r.gpus == 1)
    assert one.io_s == 0.0  # one GPU's 6 loaders have their cores
    assert p.recommendation.loader_workers == 6
    text = " ".join(map(str, p.recommendation.reasons))
    assert "need 48 cores" in text and "input-bound" in text and "fix: 48 cores" in text
    enough = plan(inp, Cluster(**{**c.to_dict(), "cpu_cores_per_node": 64}),
                  PlanOptions(architectures=("allreduce",)))
    assert next(r for r in enough.sweep if r.gpus == 8).io_s == 0.0
