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
