"""``advise`` of a built-in language model: a reduced copy is profiled here, the full model's
parallel layout is planned for the cluster (its structure checked against the profile), and
the report shows the layout's card; --check, which runs a data-parallel plan, is refused."""

import json

import pytest

from scalelab.cli import main

ARGS = ["gpt2", "--layers", "1", "--seq-len", "32", "--batch-sizes", "1", "--steps", "2",
        "--algorithms", "none", "--cluster", "llm-8x8-h100-ndr", "--quiet"]


@pytest.mark.slow
def test_advise_plans_the_full_language_model_and_reports_its_layout(tmp_path):
    out = tmp_path / "out"
    assert main(["advise", *ARGS, "--out", str(out)]) == 0
    plan = json.loads((out / "plan-llm-8x8-h100-ndr.json").read_text())
    assert plan["kind"] == "language-model"
    r = plan["recommendation"]
    assert r["tp"] * r["pp"] * r["cp"] * r["dp"] <= 64 and r["seq_len"] == 32
    check = plan["inputs"]["profile_check"]
    # the 1-block copy measured here has the parameters its configuration counts
    assert check["profiled_layers"] == 1 and check["layers"] == 12
    assert abs(check["param_count_error"]) < 0.005
    assert any("profiled here (a 1-layer copy)" in line for line in r["reasons"])
    html = (out / "report.html").read_text()
    assert "tp / pp / cp / dp" in html and f"{r['tp']} / {r['pp']} / {r['cp']} / {r['dp']}" \
        in html


def test_advise_check_of_a_language_model_is_one_line_and_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["advise", *ARGS, "--check", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--check" in err[0] and "parallel layout" in err[0], err
    assert not out.exists()
