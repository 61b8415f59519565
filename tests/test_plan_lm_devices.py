"""Of several GPU types, one that cannot hold the model is left out with its reason, and
the others are planned; when none holds it, one line."""

from scalelab.cli import main
from scalelab.results import read_json

ARGS = ("plan", "--model", "llama3-8b", "--seq-len", "8192", "--nodes", "2",
        "--network", "IB-NDR", "--objective", "cost")


def test_a_device_type_that_holds_no_layout_is_left_out_and_said(capsys, tmp_path):
    out = tmp_path / "plan.json"
    code = main([*ARGS, "--device", "H100-SXM,A100-SXM-40GB", "--out", str(out)])
    _, err = capsys.readouterr()
    assert code == 0, err
    data = read_json(out, "plan")
    assert data["recommendation"]["device"] == "H100-SXM"
    left = [w for w in data["warnings"] if w.startswith("left out: no layout of llama3-8b")]
    assert len(left) == 1 and "A100-SXM-40GB" in left[0]
    assert [d["device"] for d in data["search"]["devices"]] == ["H100-SXM"]


def test_no_device_type_that_holds_it_is_one_line(capsys):
    code = main([*ARGS, "--device", "A100-SXM-40GB,V100-SXM2-16GB", "--out", "/dev/null"])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "A100-SXM-40GB" in err and "V100-SXM2-16GB" in err
