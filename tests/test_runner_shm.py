"""Parameter-server pieces through shared memory (``--transport shm``): the same bits as over
TCP, resume included; refused in one line where the ranks may not share a host; nothing
left in /dev/shm; run.json says which transport carried the bytes."""

import dataclasses
from pathlib import Path

import pytest
import torch

from scalelab.cli import main
from scalelab.errors import RunFailure, UsageError
from scalelab.runner import RunConfig, run_training
from scalelab.workload import WorkloadSpec

CONV = WorkloadSpec("tests.toy_runner:convnet", input_shape=(1, 6, 6), num_classes=3, lr=0.05)
FAULTY = WorkloadSpec("tests.toy_runner:faulty", input_shape=(6,), num_classes=3, lr=0.05)


def _ours() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("scalelab-*")}


@pytest.mark.dist
@pytest.mark.parametrize("kw", [dict(workers=2, ps=2, piece_bytes=64),
                                dict(workers=2, ps=1, partition="tensor", optimizer="adam"),
                                dict(workers=3, ps=2, colocate=True, piece_bytes=256)],
                         ids=["2x2-pieces", "2x1-tensor-adam", "3x2-colocated"])
def test_shared_memory_trains_the_same_bits_as_tcp(kw, tmp_path):
    kw = dict(kw)
    spec = CONV
    if kw.pop("optimizer", None):
        spec = WorkloadSpec(CONV.model, input_shape=CONV.input_shape, num_classes=3,
                            optimizer="adam", lr=0.05)
    before = _ours()
    found = {}
    for transport in ("tcp", "shm"):
        out = tmp_path / f"{transport}.pt"
        run = run_training(RunConfig(workload=spec, batch_size=4, steps=4, threads=1,
                                     device="cpu", transport=transport,
                                     final_params_path=str(out), **kw))
        assert run["config"]["transport"] == transport
        assert run["bytes_per_step"]["worker"]["bytes_sent"] == run["param_bytes"]
        found[transport] = torch.load(out, weights_only=True)
    for name, t in found["tcp"].items():
        assert torch.equal(found["shm"][name], t), name
    assert _ours() == before  # every file was unlinked once mapped


def _faulty_cfg(d, **kw) -> RunConfig:
    return RunConfig(workload=FAULTY, workers=2, ps=2, steps=6, batch_size=4, piece_bytes=32,
                     checkpoint_dir=str(d), checkpoint_every=2, timeout_s=20, device="cpu",
                     transport="shm", **kw)


@pytest.mark.dist
def test_a_killed_shared_memory_run_resumes_to_the_uninterrupted_bits(tmp_path, monkeypatch):
    before = _ours()
    whole = run_training(_faulty_cfg(tmp_path / "whole"))
    monkeypatch.setenv("TOY_FAIL", "1:5:kill")
    with pytest.raises(RunFailure):
        run_training(_faulty_cfg(tmp_path / "ckpt"))
    monkeypatch.delenv("TOY_FAIL")
    resumed = run_training(_faulty_cfg(tmp_path / "ckpt", resume=True))
    assert resumed["resumed_from_step"] == 4
    assert resumed["final_param_checksum"] == whole["final_param_checksum"]
    tcp = run_training(dataclasses.replace(_faulty_cfg(tmp_path / "tcp"), transport="tcp"))
    assert tcp["final_param_checksum"] == whole["final_param_checksum"]
    assert _ours() == before  # a rank killed after the mapping leaves no file behind


@pytest.mark.parametrize("kw, why", [
    (dict(emulate_network="1gbit"), "emulated network"),
    (dict(launcher="torchrun"), "other nodes"),
    (dict(mode="async"), "asynchronous"),
    (dict(architecture="allreduce", ps=None), "parameter-server"),
])
def test_shared_memory_is_refused_where_ranks_may_not_share_a_host(kw, why):
    base = dict(workload=CONV, workers=2, ps=1, device="cpu", transport="shm")
    with pytest.raises(UsageError, match=why):
        RunConfig(**{**base, **kw})
    # auto falls back to TCP there, and takes shared memory where it can
    auto = {**base, **kw, "transport": "auto"}
    assert RunConfig(**auto).transport == "tcp"
    assert RunConfig(**{**base, "transport": "auto"}).transport == "shm"
    assert RunConfig(workload=CONV, workers=2, ps=1, device="cpu").transport == "tcp"


def test_the_cli_refuses_shared_memory_on_an_emulated_network_in_one_line(capsys, tmp_path):
    code = main(["run", "tests.toy_runner:convnet", "--input-shape", "1,6,6", "--num-classes",
                 "3", "--workers", "2", "--ps", "1", "--transport", "shm", "--device", "cpu",
                 "--emulate-network", "1gbit", "--quiet", "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "--transport shm" in err[0], err


@pytest.mark.dist
def test_the_cli_takes_auto_and_run_json_names_the_transport_it_chose(tmp_path):
    import json

    out = tmp_path / "r.json"
    code = main(["run", "tests.toy_runner:convnet", "--input-shape", "1,6,6", "--num-classes",
                 "3", "--workers", "1", "--ps", "1", "--transport", "auto", "--device", "cpu",
                 "--steps", "3", "--batch-size", "4", "--threads", "1", "--quiet",
                 "--out", str(out)])
    assert code == 0
    assert json.loads(out.read_text())["config"]["transport"] == "shm"
