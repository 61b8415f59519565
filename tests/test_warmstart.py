"""Warm starts: a process forked from a warm interpreter is the process ``python -m`` would
have started, as its parent sees it and as it sees itself."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from scalelab.runner import warmstart

PROBE = '''
import json, os, sys
line = sys.stdin.readline()
print(json.dumps({
    "argv": sys.argv[1:], "file": sys.argv[0], "cwd": os.getcwd(), "path0": sys.path[0],
    "name": __name__, "env": {k: os.environ.get(k) for k in ("RANK", "PROBE_X", "PATH")},
    "own_session": os.getsid(0) == os.getpid(), "line": line,
    "stdout_buffered": not sys.stdout.write_through,
}))
print("to stderr", file=sys.stderr)
mode = sys.argv[2] if len(sys.argv) > 2 else ""
if mode == "raise":
    raise ValueError("probe failed")
if mode == "sleep":
    import time
    time.sleep(60)
sys.exit(int(sys.argv[1]))
'''


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """A folder of probe modules: one folder, so one PYTHONPATH and one warm interpreter
    for the tests of this file."""
    folder = tmp_path_factory.mktemp("probes")
    (folder / "wsprobe.py").write_text(PROBE)
    (folder / "wsmods.py").write_text("import sys\nprint('torch' in sys.modules)\n")
    (folder / "wsnet.py").write_text(
        "import socket\nprint(sorted(n for _, n in socket.if_nameindex()))\n")
    yield folder
    warmstart.close_all()


@pytest.fixture
def probe_env(probes):
    return {**os.environ, "PYTHONPATH": str(probes), "PROBE_X": "x"}


def _run(env, *args, warm=True, cwd=None, stdin="hello\n", **kw):
    p = warmstart.popen([sys.executable, "-m", "wsprobe", *args], env=env, warm=warm,
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True, cwd=cwd, **kw)
    out, err = p.communicate(stdin, timeout=120)
    return p, out, err


def test_a_warm_process_sees_what_a_new_interpreter_sees(probe_env, tmp_path):
    env = {**probe_env, "RANK": "3"}
    cold, cold_out, cold_err = _run(env, "7", "a b", warm=False, cwd=tmp_path,
                                    start_new_session=True)
    warm, warm_out, warm_err = _run(env, "7", "a b", cwd=tmp_path, start_new_session=True)
    assert type(cold) is subprocess.Popen and isinstance(warm, warmstart.WarmPopen)
    assert (warm.returncode, cold.returncode) == (7, 7)
    assert json.loads(warm_out) == json.loads(cold_out)
    seen = json.loads(warm_out)
    assert seen["argv"] == ["7", "a b"] and seen["name"] == "__main__"
    assert seen["cwd"] == seen["path0"] == str(tmp_path)
    assert seen["env"]["RANK"] == "3" and seen["own_session"] and seen["line"] == "hello\n"
    assert warm_err == cold_err == "to stderr\n"


def test_output_is_unbuffered_when_the_environment_says_so(probe_env):
    _, out, _ = _run({**probe_env, "PYTHONUNBUFFERED": "1"}, "0")
    _, cold, _ = _run({**probe_env, "PYTHONUNBUFFERED": "1"}, "0", warm=False)
    assert json.loads(out)["stdout_buffered"] is json.loads(cold)["stdout_buffered"] is False
    buffered = {k: v for k, v in probe_env.items() if k != "PYTHONUNBUFFERED"}
    _, out, _ = _run(buffered, "0")
    _, cold, _ = _run(buffered, "0", warm=False)
    assert json.loads(out)["stdout_buffered"] is json.loads(cold)["stdout_buffered"] is True


def test_the_warm_interpreter_has_torch_already(probe_env):
    for warm, expected in ((True, "True"), (False, "False")):
        p = warmstart.popen([sys.executable, "-m", "wsmods"], env=probe_env, warm=warm,
                            stdout=subprocess.PIPE, text=True)
        assert p.communicate(timeout=120)[0].strip() == expected


def test_exit_statuses_come_back_as_popen_gives_them(probe_env):
    p, _, err = _run(probe_env, "0", "raise")
    assert p.returncode == 1 and err.rstrip().endswith("ValueError: probe failed")
    p = warmstart.popen([sys.executable, "-m", "wsprobe", "0", "sleep"],
                        env=probe_env, stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert isinstance(p, warmstart.WarmPopen)
    p.stdin.write("go\n")
    p.stdin.flush()
    assert p.stdout.readline().startswith("{")
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.3)
    assert p.poll() is None
    os.killpg(p.pid, signal.SIGTERM)  # its own process group, as the runner signals ranks
    assert p.wait(timeout=30) == -signal.SIGTERM
    p.stdout.close()
    p.stdin.close()


def test_only_late_variables_share_a_warm_interpreter(probe_env):
    a = warmstart.popen([sys.executable, "-m", "wsprobe", "0"],
                        env={**probe_env, "RANK": "0", "GLOO_SOCKET_IFNAME": "lo"},
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    b = warmstart.popen([sys.executable, "-m", "wsprobe", "0"],
                        env={**probe_env, "RANK": "1", "NCCL_DEBUG": "INFO"},
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    c = warmstart.popen([sys.executable, "-m", "wsprobe", "0"],
                        env={**probe_env, "GOMP_SPINCOUNT": "1"},  # read as torch loads
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    assert all(isinstance(p, warmstart.WarmPopen) for p in (a, b, c))
    assert a._zygote is b._zygote and c._zygote is not a._zygote
    assert [p.wait(timeout=120) for p in (a, b, c)] == [0, 0, 0]


def test_warm_starts_can_be_turned_off(probe_env):
    p, _, _ = _run({**probe_env, "SCALELAB_WARM_START": "0"}, "0")
    assert type(p) is subprocess.Popen and p.returncode == 0


def test_other_commands_start_as_they_are(probe_env):
    p = warmstart.popen([sys.executable, "-c", "print(1)"], env=probe_env,
                        stdout=subprocess.PIPE, text=True)
    assert type(p) is subprocess.Popen and p.communicate(timeout=60)[0] == "1\n"


@pytest.mark.netem
def test_a_warm_process_enters_the_network_namespace_it_is_given(probe_env):
    from scalelab.netem import PREFIX

    name = f"{PREFIX}{os.getpid()}probe"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        outs = []
        for warm in (True, False):
            p = warmstart.popen(["ip", "netns", "exec", name, sys.executable, "-m", "wsnet"],
                                env=probe_env, warm=warm, stdout=subprocess.PIPE, text=True)
            assert isinstance(p, warmstart.WarmPopen) is warm
            outs.append(p.communicate(timeout=120)[0])
        assert outs[0] == outs[1] == "['lo']\n"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    p = warmstart.popen(["ip", "netns", "exec", name, sys.executable, "-m", "wsnet"],
                        env=probe_env, stderr=subprocess.PIPE, text=True)
    err = p.communicate(timeout=60)[1]
    assert p.returncode == 255 and f'Cannot open network namespace "{name}"' in err


def test_a_process_that_dies_with_its_parent_ends_with_the_warm_interpreter(probe_env):
    p = warmstart.popen([sys.executable, "-m", "wsprobe", "0", "sleep"],
                        env=probe_env, stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True, die_with_parent=True)
    p.stdin.write("go\n")
    p.stdin.flush()
    assert p.stdout.readline().startswith("{")
    pid = p.pid
    warmstart.close_all()
    assert p.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"process {pid} outlived the warm interpreter")
    p.stdout.close()
    p.stdin.close()


def test_a_cpu_runs_ranks_are_forked_warm(monkeypatch):
    from scalelab.runner import RunConfig, run_training
    from scalelab.workload import WorkloadSpec

    started = []

    def recording(cmd, **kwargs):
        p = popen(cmd, **kwargs)
        started.append(type(p))
        return p

    popen = warmstart.popen
    monkeypatch.setattr(warmstart, "popen", recording)
    spec = WorkloadSpec("tests.toy_models:mlp", input_shape=(6,), num_classes=3)
    result = run_training(RunConfig(workload=spec, workers=2, ps=1, steps=3, warmup_steps=1,
                                    batch_size=4, device="cpu"))
    assert result["samples_per_s"] > 0
    assert started == [warmstart.WarmPopen] * 3
