import pytest

from scalelab.theory import io


def test_exposed_io_and_loaders():
    assert io.exposed_io_s(0.5, 1, 0.2) == pytest.approx(0.3)
    assert io.exposed_io_s(0.5, 3, 0.2) == 0.0
    assert io.exposed_io_s(0.5, 0, 0.2) == 0.5
    assert io.loader_workers_needed(0.5, 0.2) == 3
    assert io.loader_workers_needed(0.4, 0.2) == 2
    assert io.loader_workers_needed(0.0, 0.2) == 0
    n = io.loader_workers_needed(0.5, 0.2)
    assert io.exposed_io_s(0.5, n, 0.2) == 0.0
    assert io.exposed_io_s(0.5, n - 1, 0.2) > 0.0
    with pytest.raises(ValueError):
        io.loader_workers_needed(0.5, 0.0)


def test_node_input_eight_gpus_on_32_cores():
    """8 GPUs, T_C = 0.1 s, b = 256, 2 ms per sample per core (worked by hand).

    t_load = 256 * 0.002 = 0.512 s -> L = ceil(5.12) = 6 per GPU, 8 * 6 = 48 processes.
    32 cores: each GPU's loaders get 32/8 = 4 cores, a batch every 0.512/4 = 0.128 s, so
    0.028 s of every step shows; the node runs 8 * 256 / 0.128 = 16,000 samples/s
    (= 32 cores / 2 ms), not the 8 * 256 / 0.1 = 20,480 its GPUs could.
    """
    n = io.node_input(0.002, 256, 0.1, gpus_per_node=8, cpu_cores=32)
    assert n.load_s_per_batch == pytest.approx(0.512)
    assert n.loaders_per_gpu == 6 and n.cores_needed == 48
    assert n.input_bound is True
    assert n.exposed_io_s == pytest.approx(0.028)
    assert n.step_s == pytest.approx(0.128)
    assert n.samples_per_s == pytest.approx(16_000)
    assert n.samples_per_s_compute == pytest.approx(20_480)
    enough = io.node_input(0.002, 256, 0.1, gpus_per_node=8, cpu_cores=48)
    assert enough.input_bound is False and enough.exposed_io_s == 0.0
    assert enough.samples_per_s == pytest.approx(20_480)
    unknown = io.node_input(0.002, 256, 0.1, gpus_per_node=8)
    assert unknown.input_bound is None and unknown.exposed_io_s == 0.0


def test_node_exposed_io_limits():
    # cores to spare: the per-device formula; fewer loaders than cores: L binds
    assert io.node_exposed_io_s(0.5, 1, 0.2, 1, 8) == pytest.approx(io.exposed_io_s(0.5, 1, 0.2))
    assert io.node_exposed_io_s(0.5, 3, 0.2, 2, 64) == 0.0
    # 2 GPUs x 3 loaders on 2 cores: a batch every 0.5 / 1 s
    assert io.node_exposed_io_s(0.5, 3, 0.2, 2, 2) == pytest.approx(0.3)
    assert io.node_exposed_io_s(0.5, 0, 0.2, 2, 2) == 0.5
    assert io.node_cores_needed(8, 6) == 48
    # a user-chosen loader count below the recommendation
    few = io.node_input(0.002, 256, 0.1, gpus_per_node=8, cpu_cores=64, loaders_per_gpu=2)
    assert few.exposed_io_s == pytest.approx(0.156) and few.cores_needed == 16
    with pytest.raises(ValueError, match="cpu_cores"):
        io.node_exposed_io_s(0.5, 1, 0.2, 1, 0)
    with pytest.raises(ValueError, match="gpus_per_node"):
        io.node_input(0.002, 256, 0.1, gpus_per_node=0)


def test_shared_cores_step_bounds():
    from scalelab.theory.io import shared_cores_step_s

    # no loader: decoding comes before the step
    assert shared_cores_step_s(0.05, 0.03, 0.04, 0, 1.0) == pytest.approx(0.09)
    # one core, compute 30 ms of a 50 ms step (20 ms exchange): 40 ms of decoding needs
    # 70 ms of the core per step, so the step grows to 70 ms
    assert shared_cores_step_s(0.05, 0.03, 0.04, 2, 1.0) == pytest.approx(0.07)
    # decoding fits in the exchange's idle time: hidden entirely
    assert shared_cores_step_s(0.05, 0.03, 0.015, 2, 1.0) == pytest.approx(0.05)
    # plenty of cores: one loader delivers a batch every t_load
    assert shared_cores_step_s(0.05, 0.03, 0.08, 1, 8.0) == pytest.approx(0.08)
    assert shared_cores_step_s(0.05, 0.03, 0.08, 2, 8.0) == pytest.approx(0.05)
    # a core for every loader and no exchange: max(T_C, t_load / L), as exposed_io_s
    from scalelab.theory.io import exposed_io_s
    for t_load, L in ((0.1, 1), (0.1, 2), (0.01, 3)):
        assert shared_cores_step_s(0.03, 0.03, t_load, L, 1 + L) == pytest.approx(
            0.03 + exposed_io_s(t_load, L, 0.03))
    with pytest.raises(ValueError):
        shared_cores_step_s(0.05, 0.03, 0.04, 1, 0)
