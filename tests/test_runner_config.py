"""Bad input to the runner: one line on stderr, exit 2, nothing started."""

import pytest

from scalelab.cli import main
from scalelab.errors import UsageError
from scalelab.runner import RunConfig
from scalelab.workload import WorkloadSpec

SPEC = WorkloadSpec("tests.toy_models:mlp", input_shape=(6,), num_classes=3)
BASE = ["run", "tests.toy_models:mlp", "--input-shape", "6", "--num-classes", "3", "--quiet"]


@pytest.mark.parametrize("args,message", [
    (["--workers", "2", "--ps", "0"], "--ps must be >= 1"),
    (["--workers", "0"], "--workers must be >= 1"),
    (["--workers", "2", "--ps", "1", "--ps-placement", "colocated", "--launcher", "torchrun"],
     "--ps must equal --workers"),
    (["--workers", "2", "--architecture", "allreduce", "--mode", "async"], "synchronous"),
    (["--workers", "2", "--mode", "async", "--checkpoint-dir", "d"], "need --mode sync"),
    (["--workers", "2", "--resume"], "need --checkpoint-dir"),
    (["--workers", "2", "--timeout", "0"], "--timeout must be > 0"),
    # infinity was taken and each rank failed on it (OverflowError, exit 1)
    (["--workers", "2", "--timeout", "inf"], "--timeout must be > 0 and at most 1e+09 seconds"),
    (["--workers", "2", "--timeout", "nan"], "--timeout must be > 0 and at most"),
    (["--workers", "2", "--data", "/nonexistent/images"], "not a folder"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, capsys, tmp_path):
    code = main([*BASE, *args, "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("command", [
    ["validate", "--grid", "workers=2"], ["compare", "--workers", "2"]])
@pytest.mark.parametrize("value", ["inf", "nan", "0"])
def test_validate_and_compare_take_the_runs_timeout(command, value, capsys, tmp_path):
    code = main([command[0], *BASE[1:6], *command[1:], "--timeout", value,
                 "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "--timeout must be > 0 and at most 1e+09 seconds" in err[0], err
    assert not (tmp_path / "r.json").exists()


def test_torchrun_world_size_must_match_the_roles(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "5")
    monkeypatch.setenv("LOCAL_RANK", "0")
    code = main([*BASE, "--workers", "2", "--ps", "1", "--launcher", "torchrun",
                 "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "world size 5 does not match the roles" in err[0], err


def test_torchrun_launcher_outside_torchrun(monkeypatch, capsys, tmp_path):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    code = main([*BASE, "--workers", "2", "--launcher", "torchrun",
                 "--out", str(tmp_path / "r.json")])
    assert code == 2
    assert "needs torchrun's environment" in capsys.readouterr().err


def test_roles_and_hosts():
    cfg = RunConfig(workload=SPEC, workers=3, ps=2)
    assert cfg.world_size == 5
    assert [cfg.role_of(r) for r in range(5)] == [
        ("worker", 0), ("worker", 1), ("worker", 2), ("server", 0), ("server", 1)]
    assert cfg.server_rank(1) == 4 and cfg.worker_rank(2) == 2
    co = RunConfig(workload=SPEC, workers=2, colocate=True)
    assert co.ps == 2
    assert [co.role_of(r) for r in range(4)] == [
        ("worker", 0), ("server", 0), ("worker", 1), ("server", 1)]
    assert [co.host_of(r) for r in range(4)] == [0, 0, 1, 1] and co.num_hosts == 2
    # any count on some of the hosts: server k on worker host k mod W, as the plan places them
    some = RunConfig(workload=SPEC, workers=4, ps=3, colocate=True)
    assert some.world_size == 7 and some.num_hosts == 4
    assert [some.role_of(r) for r in range(7)] == [
        ("worker", 0), ("worker", 1), ("worker", 2), ("worker", 3),
        ("server", 0), ("server", 1), ("server", 2)]
    assert [some.host_of(r) for r in range(7)] == [0, 1, 2, 3, 0, 1, 2]
    more = RunConfig(workload=SPEC, workers=2, ps=3, colocate=True)
    assert [more.host_of(more.server_rank(k)) for k in range(3)] == [0, 1, 0]
    ddp = RunConfig(workload=SPEC, workers=4, architecture="allreduce")
    assert ddp.ps == 0 and ddp.world_size == 4
    assert RunConfig.from_dict(co.to_dict()) == co


def test_config_errors_are_usage_errors():
    with pytest.raises(UsageError, match="--batch-size"):
        RunConfig(workload=SPEC, workers=2, batch_size=0)
    with pytest.raises(UsageError, match="makes no sense"):
        RunConfig(workload=SPEC, workers=2, ps=2, architecture="allreduce")


def test_exchange_form_is_stated_once_per_architecture_and_mode():
    from scalelab.runner.config import ALLREDUCE_EXCHANGE, ASYNC_EXCHANGE
    from scalelab.theory.comm import PIPELINED, PUSH_THEN_PULL

    spec = SPEC
    assert RunConfig(workload=spec, workers=2, ps=1).exchange_form == PUSH_THEN_PULL
    assert RunConfig(workload=spec, workers=2, ps=1, piece_bytes=4096).exchange_form == PIPELINED
    assert RunConfig(workload=spec, workers=2, ps=1, mode="async").exchange_form == ASYNC_EXCHANGE
    ar = RunConfig(workload=spec, workers=2, architecture="allreduce")
    assert ar.exchange_form == ALLREDUCE_EXCHANGE
    assert ar.to_dict()["exchange_form"] == ALLREDUCE_EXCHANGE
    assert RunConfig.from_dict(ar.to_dict()) == ar
