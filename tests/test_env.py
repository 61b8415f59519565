import json

import torch

from scalelab.cli import main


def test_env_json(capsys):
    assert main(["env", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["torch"] == torch.__version__ and env["num_threads"] == torch.get_num_threads()
    assert env["device"] == "cpu" and env["cuda_available"] == torch.cuda.is_available()
