"""The sweep's fast path gives the rows of the model called point by point.

The sweep builds one validated setup per (network, architecture) and varies the device
count through :meth:`StepSetup.at_workers`, shares one prediction among the counts with the
same :func:`~scalelab.plan.step.step_key`, memoizes the parameter-server phases and the
hierarchical exchange, and makes its rows with the shared parts worked out once. Here every
row is compared, field by field and exactly, with a freshly validated :class:`StepSetup`
given to :func:`predict_step` at that point (its memos bypassed) and the row's figures
written out from their definitions.
"""

from __future__ import annotations

import pytest

from scalelab import hardware
from scalelab.errors import UsageError
from scalelab.plan import (
    ARCHITECTURES,
    Cluster,
    ModelParams,
    StepSetup,
    StepWorkload,
    network_sweep,
    predict_step,
    step,
    sweep_architecture,
)
from scalelab.plan.sweep import Sweeper
from scalelab.theory import comm, sharding, topology

NETWORKS = ("10GbE", "100GbE", "IB-FDR")
COUNTS = range(1, 15)  # one device, part of a node, whole nodes, more nodes than the cluster
BATCH = 32
TENSORS = (60_000_000, 25_000_000, 9_000_000, 4_000_000, 1_500_000, 500_000)
WORK = StepWorkload(sum(TENSORS), 0.12, io_s=0.004, tensor_bytes=TENSORS)
PARAMS = ModelParams(bandwidth_efficiency=0.9, latency_s=2e-5, overlap=0.2,
                     apply_s_per_byte=1e-11)

CLUSTERS = {
    "ps dedicated, NIC shared by 2, host link, price": dict(
        nodes=3, gpus_per_node=4, network="25GbE", intra_node="nvlink3", gpus_per_nic=2,
        host_link="pcie4", price_per_gpu_hour=2.0),
    "ps dedicated, whole tensors, own server network": dict(
        nodes=3, gpus_per_node=4, network="25GbE", intra_node="pcie4", ps_partition="tensor",
        ps_network="IB-NDR", ps=2, latency_s=1e-4),
    "ps dedicated, every device a sender": dict(
        nodes=2, gpus_per_node=4, network="10GbE", intra_node="pcie3",
        local_aggregation=False, full_duplex=True),
    "ps colocated, one per node, shared uplinks": dict(
        nodes=3, gpus_per_node=4, network="25GbE", intra_node="nvlink3",
        ps_placement="colocated", host_link="pcie3", gpus_per_host_link=2, gpus_per_nic=2),
    "ps colocated, one per device, pipelined": dict(
        nodes=3, gpus_per_node=4, network="25GbE", intra_node="nvlink3",
        ps_placement="colocated", ps=12, full_duplex=True, local_aggregation=False),
    "one device per node": dict(nodes=4, gpus_per_node=1, network="1GbE"),
}


def _expected_rows(cluster: Cluster, arch: str, counts, network: str | None,
                   nic_Bps: float | None, target: float = 0.8, derive_overlap: bool = False,
                   io_at=None) -> list:
    """Rows of ``arch`` from a validated StepSetup per point and the rows' definitions,
    with the model's memos bypassed (each phase and shard balance computed afresh)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(topology, "ps_phase", topology.ps_phase.__wrapped__)
        mp.setattr(sharding, "cached_balance", sharding.cached_balance.__wrapped__)
        mp.setattr(step, "_hierarchical_allreduce", comm.hierarchical_allreduce)
        return _rows_point_by_point(cluster, arch, counts, network, nic_Bps, target,
                                    derive_overlap, io_at)


def _rows_point_by_point(cluster: Cluster, arch: str, counts, network: str | None,
                         nic_Bps: float | None, target: float, derive_overlap: bool,
                         io_at) -> list:
    sw = Sweeper(WORK, cluster, PARAMS, arch, nic_Bps, target, derive_overlap)

    def work_at(g: int) -> StepWorkload:
        if io_at is None:
            return WORK
        return StepWorkload(WORK.param_bytes, WORK.compute_s, io_at(min(g, cluster.gpus_per_node)),
                            WORK.tensor_bytes, WORK.backward_s)

    base = predict_step(work_at(1), StepSetup(arch), PARAMS).step_s
    rows = []
    for g in counts:
        colocated = cluster.ps_placement == "colocated"
        setup = StepSetup(
            architecture=arch, workers=g,
            num_ps=sw.servers(g)[1] if arch == "ps" and g > 1 else 1,
            partition=cluster.ps_partition, colocated=colocated,
            full_duplex=cluster.full_duplex, gpus_per_node=cluster.gpus_per_node,
            local_aggregation=cluster.local_aggregation, worker_bandwidth_Bps=sw.nic,
            ps_bandwidth_Bps=None if colocated else sw.ps_Bps,
            intra_bandwidth_Bps=cluster.intra_link()[0], latency_s=cluster.latency_s,
            gpus_per_nic=cluster.nic_sharing()[0], host_bandwidth_Bps=sw.host_Bps,
            gpus_per_host_link=cluster.host_link_sharing()[0],
            bucket_bytes=cluster.ddp_bucket_mb * 2**20 if derive_overlap else None)
        assert sw.setup(g) == setup
        fast = sw.setup(g)
        assert (fast.nodes, fast.devices_per_node, fast.nics) == \
            (setup.nodes, setup.devices_per_node, setup.nics)
        pred = predict_step(work_at(g), setup, PARAMS)
        sps = g * BATCH / pred.step_s
        speedup = sps / (BATCH / base)
        price = cluster.price_per_gpu_hour
        rows.append(dict(
            gpus=g, nodes=-(-g // cluster.gpus_per_node), architecture=arch,
            num_ps=pred.num_ps if arch == "ps" and g > 1 else 0, compute_s=pred.compute_s,
            comm_s=pred.comm_s, io_s=pred.io_s, step_s=pred.step_s, samples_per_s=sps,
            speedup=speedup, efficiency=speedup / g,
            overhead_ratio=(pred.step_s - pred.compute_s) / pred.compute_s,
            bottleneck=pred.bottleneck, network=network or cluster.network_label(),
            form=pred.form,
            cost_per_1k_samples=price * g / 3600.0 / sps * 1000.0 if price else None,
            step_s_low=None, step_s_high=None, samples_per_s_low=None,
            samples_per_s_high=None))
    return rows


@pytest.mark.parametrize("name", CLUSTERS)
def test_network_sweep_rows_equal_the_model_point_by_point(name):
    cluster = Cluster(**CLUSTERS[name])
    got = [r.to_dict() for r in network_sweep(WORK, cluster, NETWORKS, COUNTS, BATCH,
                                              ARCHITECTURES, PARAMS, 0.7)]
    want = []
    for net in NETWORKS:
        for arch in ARCHITECTURES:
            want += _expected_rows(cluster, arch, COUNTS, net,
                                   hardware.network(net).payload_Bps, 0.7)
    assert len(got) == len(want) == len(NETWORKS) * len(ARCHITECTURES) * len(COUNTS)
    for g, w in zip(got, want, strict=True):
        assert g == w  # exactly: the same arithmetic in the same order


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_sweep_with_input_and_bucket_overlap_equals_the_model(arch):
    cluster = Cluster(**CLUSTERS["ps colocated, one per node, shared uplinks"])
    counts = [1, 2, 3, 5, 8, 12, 13]

    def io_at(g: int) -> float:
        return 0.001 * g

    got = [r.to_dict() for r in sweep_architecture(WORK, cluster, PARAMS, arch, counts, BATCH,
                                                   derive_overlap=True, io_at=io_at)]
    assert got == _expected_rows(cluster, arch, counts, None, None, 0.8, True, io_at)


def test_setup_at_another_worker_count_is_the_validated_setup():
    base = StepSetup("hierarchical", gpus_per_node=8, gpus_per_nic=2,
                     worker_bandwidth_Bps=1e9, intra_bandwidth_Bps=1e10)
    for g in (1, 2, 3, 8, 9, 64):
        fresh = StepSetup("hierarchical", workers=g, num_ps=3, gpus_per_node=8, gpus_per_nic=2,
                          worker_bandwidth_Bps=1e9, intra_bandwidth_Bps=1e10)
        fast = base.at_workers(g, 3)
        assert fast == fresh and vars(fast) == vars(fresh)
    assert base.workers == 1 and base.nodes == 1  # the base is left as it was
    for bad in (0, -1, 2.5):
        with pytest.raises(UsageError, match=f"workers must be an integer >= 1, got {bad}"):
            base.at_workers(bad, 1)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_bad_device_count_is_still_refused(arch):
    cluster = Cluster(nodes=2, gpus_per_node=4, network="10GbE", intra_node="nvlink3")
    with pytest.raises(UsageError, match="workers must be an integer >= 1, got 0"):
        sweep_architecture(WORK, cluster, PARAMS, arch, [4, 0], BATCH)


@pytest.mark.parametrize("name", CLUSTERS)
def test_setups_with_the_same_step_key_predict_the_same_step(name):
    cluster = Cluster(**CLUSTERS[name])
    for arch in ARCHITECTURES:
        sw = Sweeper(WORK, cluster, PARAMS, arch)
        seen: dict[tuple[int, ...], tuple[int, object]] = {}
        for g in range(1, 3 * cluster.gpus_per_node + 2):
            for num_ps in (1, 2, 3):
                setup = sw.base_setup().at_workers(g, num_ps)
                key = step.step_key(setup)
                # the sweep's key, found without making the setup, is the setup's
                assert sw.base_setup().key_at(g, num_ps) == key
                if g > 1 and (arch == "hierarchical" or cluster.local_aggregation
                              and arch == "ps"):
                    assert key == (setup.nodes, setup.devices_per_node, num_ps)
                pred = predict_step(WORK, setup, PARAMS).to_dict()
                first = seen.setdefault(key, (g, pred))
                assert pred == first[1], (arch, g, num_ps, first[0])
