import os
import shutil
import subprocess

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _tmp_cache_dir(tmp_path_factory):
    """Counted operations, fits and profiles go to a folder of this test session, never to
    the user's cache (subprocesses inherit it); a test that sets SCALELAB_CACHE itself gets
    its own folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCALELAB_CACHE_DIR", str(tmp_path_factory.mktemp("scalelab-cache")))
        yield


def _is_root_with_netns() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = f"sltest-probe-{os.getpid()}"
    ok = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ok


def pytest_collection_modifyitems(config, items):
    need_gpu = pytest.mark.skip(reason="needs CUDA")
    need_netns = pytest.mark.skip(reason="needs root and network namespaces")
    has_cuda = torch.cuda.is_available()
    netns = None
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(need_gpu)
        if "netem" in item.keywords:
            if netns is None:
                netns = _is_root_with_netns()
            if not netns:
                item.add_marker(need_netns)
