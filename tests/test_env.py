import json

import torch

from scalelab.cli import main


def test_env_json(capsys):
    assert main(["env", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["torch"] == torch.__version__ and env["num_threads"] == torch.get_num_threads()
    assert env["device"] == "cpu" and env["cuda_available"] == torch.cuda.is_available()


def test_env_names_torchvision_as_it_names_itself_without_importing_it():
    """Importing torchvision takes seconds (most of it torch._dynamo); its version is read
    from its version.py instead, build label and all."""
    import subprocess
    import sys

    code = ("import sys; from scalelab.environment import collect_environment; "
            "v = collect_environment()['torchvision']; print('torchvision' in sys.modules); "
            "import torchvision; print(v == torchvision.__version__, v)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:2] == ["False", "True"], out
