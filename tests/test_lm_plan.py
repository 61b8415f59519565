"""``scalelab plan`` for language models, in process: plan.json's contract, advice that
matches practice, the cost objective across GPU types, what the user fixes, bad input."""

from __future__ import annotations

import json

import pytest

from scalelab.cli import main
from scalelab.results import read_json

FIELDS = ("seq_len", "global_batch", "micro_batch", "accumulation", "recompute", "precision",
          "layout", "tp", "pp", "vpp", "cp", "dp", "schedule", "sequence_parallel", "step_s",
          "tokens_per_s", "mfu", "memory_bytes", "cost_per_million_tokens", "train_days",
          "train_cost")
H100_64 = ("--cluster", "llm-8x8-h100-ndr")


def _plan(capsys, tmp_path, *argv):
    out = tmp_path / "plan.json"
    code = main(["plan", *argv, "--out", str(out)])
    text, err = capsys.readouterr()
    assert code == 0, err
    return read_json(out, "plan"), text


def _fails(capsys, *argv) -> str:
    code = main(["plan", *argv, "--out", "/dev/null"])
    out, err = capsys.readouterr()
    assert code == 2, out
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_gpt2_on_one_node_is_plain_data_parallel(capsys, tmp_path):
    data, text = _plan(capsys, tmp_path, "--model", "gpt2", "--nodes", "1",
                       "--gpus-per-node", "8", "--device", "H100-SXM", "--tokens", "300B")
    r = data["recommendation"]
    for key in FIELDS + ("launch", "reasons", "alternatives"):
        assert key in r, key
    assert (r["tp"], r["pp"], r["cp"], r["dp"]) == (1, 1, 1, 8)
    assert r["micro_batch"] * r["accumulation"] * r["dp"] == r["global_batch"]
    assert r["tokens_per_s"] == pytest.approx(r["global_batch"] * r["seq_len"] / r["step_s"])
    assert r["train_days"] == pytest.approx(3e11 / r["tokens_per_s"] / 86400)
    assert r["train_cost"] == pytest.approx(r["train_days"] * 24 * 8 * r["price_per_gpu_hour"])
    assert r["cost_per_million_tokens"] > 0 and 0 < r["mfu"] < 1
    assert "--workers 8" in r["launch"] and "scalelab run gpt2" in r["launch"]
    assert r["alternatives"] and all(k in a for a in r["alternatives"] for k in FIELDS)
    # the tensor split of the runners-up loses to plain data parallelism
    tp_best = data["recommendation"]["alternatives"]
    assert all(a["tokens_per_s"] <= r["tokens_per_s"] * 1.02 for a in tp_best)
    assert any(reason.startswith("tp 1") and "against tp 2" in reason
               for reason in r["reasons"])
    assert "recommend tp 1 x pp 1 x dp 8" in text


def test_llama3_70b_on_8x8_h100_fits_and_says_why(capsys, tmp_path):
    data, _ = _plan(capsys, tmp_path, "--model", "llama3-70b", "--seq-len", "8192", *H100_64)
    r = data["recommendation"]
    usable = data["inputs"]["target"]["memory_bytes"] * data["inputs"]["target"]["memory_margin"]
    assert r["memory_bytes"] <= usable <= 80 * 2**30
    assert r["tp"] <= 8 and r["tp"] * r["pp"] * r["cp"] * r["dp"] == 64
    why = " ".join(r["reasons"])
    assert "layouts of 64 H100-SXM GPUs searched" in why and "6N + 12 L h s" in why
    tp_reason = next(x for x in r["reasons"] if x.startswith(f"tp {r['tp']}"))
    for other in {1, 2, 4, 8} - {r["tp"]}:  # each other tensor degree, with its figure
        assert f"tp {other}: " in tp_reason
    assert data["search"]["evaluated"] > 100
    # Megatron-LM's practice (selective recomputation beside sequence parallelism): the
    # tensor split then stays inside a node, on NVLink, and the reason says so
    data, _ = _plan(capsys, tmp_path, "--model", "llama3-70b", "--seq-len", "8192", *H100_64,
                    "--recompute", "selective")
    r = data["recommendation"]
    assert 1 < r["tp"] <= 8 and r["recompute"] == "selective"
    assert r["memory_bytes"] <= usable
    tp_reason = next(x for x in r["reasons"] if x.startswith(f"tp {r['tp']} inside a node"))
    assert "does not fit" in tp_reason  # the smaller splits do not hold the model


def test_cost_objective_picks_the_cheaper_per_token(capsys, tmp_path):
    data, _ = _plan(capsys, tmp_path, "--model", "llama3-8b", "--seq-len", "4096",
                    "--nodes", "2", "--gpus-per-node", "8", "--network", "IB-NDR",
                    "--device", "H100-SXM,A100-SXM-40GB", "--objective", "cost")
    r = data["recommendation"]
    other = [a for a in r["alternatives"] if a["device"] != r["device"]]
    assert len(other) == 1
    assert r["cost_per_million_tokens"] <= other[0]["cost_per_million_tokens"]
    why = next(x for x in r["reasons"] if "is the cheapest per token" in x)
    for figure in (r["cost_per_million_tokens"], other[0]["cost_per_million_tokens"]):
        assert f"${figure:.3f} per million tokens" in why
    assert {d["device"] for d in data["search"]["devices"]} == {"H100-SXM", "A100-SXM-40GB"}


def test_every_choice_fixed_is_evaluated_as_given(capsys, tmp_path):
    data, _ = _plan(capsys, tmp_path, "--model", "llama3-70b", *H100_64, "--tp", "8",
                    "--pp", "2", "--cp", "1", "--schedule", "1f1b", "--sequence-parallel",
                    "--micro-batch", "1", "--layout", "zero1", "--recompute", "selective",
                    "--precision", "bf16", "--global-batch", "256")
    r = data["recommendation"]
    assert r["evaluated_only"] and data["search"]["considered"] == 1
    assert (r["tp"], r["pp"], r["dp"], r["accumulation"], r["layout"]) == (8, 2, 4, 64, "zero1")
    assert r["reasons"][0].startswith("every choice was given")
    for flag in ("--tp 8", "--pp 2 --schedule 1f1b", "--sequence-parallel",
                 "--architecture fsdp --zero 1", "--accumulation-steps 64"):
        assert flag in r["launch"]


def test_lm_workload_file(capsys, tmp_path):
    wl = tmp_path / "w.toml"
    wl.write_text('model = "gpt2"\nseq_len = 512\nglobal_batch = 64\ntokens = "1B"\n')
    data, _ = _plan(capsys, tmp_path, "--workload", str(wl), "--nodes", "1",
                    "--gpus-per-node", "4", "--device", "A100-SXM-80GB", "--json")
    r = data["recommendation"]
    assert (r["seq_len"], r["global_batch"], r["gpus"]) == (512, 64, 4)
    assert r["train_days"] == pytest.approx(1e9 / r["tokens_per_s"] / 86400)
    assert r["cost_per_million_tokens"] is None  # no price for this device
    assert data["estimate"] is True and data["warnings"][0].startswith("an estimate")


def test_measured_step_scales_the_compute(capsys, tmp_path):
    wl = tmp_path / "w.toml"
    base = 'model = "gpt2"\nseq_len = 1024\nglobal_batch = 64\nbatch_size = 8\n'
    wl.write_text(base)
    est, _ = _plan(capsys, tmp_path, "--workload", str(wl), "--nodes", "1",
                   "--gpus-per-node", "8", "--device", "H100-SXM")
    wl.write_text(base + 'step_s = 2.0\ndevice = "H100-SXM"\n')
    meas, _ = _plan(capsys, tmp_path, "--workload", str(wl), "--nodes", "1",
                    "--gpus-per-node", "8", "--device", "H100-SXM")
    assert meas["recommendation"]["tokens_per_s"] < est["recommendation"]["tokens_per_s"]
    assert "from a measurement" in meas["warnings"][0]


@pytest.mark.parametrize("argv, words", [
    (("--model", "llama3-70b", *H100_64, "--tp", "3"), "does not divide llama3-70b's 64"),
    (("--model", "llama3-70b", *H100_64, "--pp", "81"), "more pipeline stages"),
    (("--model", "llama3-70b", *H100_64, "--tp", "8", "--pp", "4", "--cp", "4"),
     "does not divide the cluster's 64 GPUs"),
    (("--model", "llama3-70b", *H100_64, "--vpp", "2", "--schedule", "1f1b"),
     "needs the interleaved schedule"),
    (("--model", "llama3-70b", *H100_64, "--pp", "8", "--schedule", "1f1b",
      "--accumulation-steps", "4"), "needs at least 8 micro-batches"),
    (("--model", "gpt2", "--nodes", "1", "--gpus-per-node", "2", "--device", "cpu", "--cp",
      "2"), "context parallelism runs only where CUDA is"),
    (("--model", "gpt2", "--nodes", "1", "--gpus-per-node", "8", "--device",
      "A100-SXM-80GB", "--objective", "cost"), "needs a price per GPU-hour for A100-SXM-80GB"),
    (("--model", "gpt2", "--device", "H100-SXM", "--tokens", "-3"), "positive count"),
    (("--model", "gpt2", "--device", "H100-SXM", "--tokens", "lots"), "positive count"),
    (("--model", "llama3-70b", *H100_64, "--seq-len", "16384"), "beyond llama3-70b's 8192"),
    (("--model", "resnet50", "--device", "H100-SXM"), "not a language-model preset"),
])
def test_bad_input_is_one_line(capsys, argv, words):
    assert words in _fails(capsys, *argv)


def test_lm_options_refused_for_a_data_parallel_plan(capsys, tmp_path):
    wl = tmp_path / "w.toml"
    wl.write_text("param_bytes = 180_000_000\nbatch_size = 32\nstep_s = 0.3\n")
    assert "--tp: for a language model" in _fails(capsys, "--workload", str(wl), "--tp", "2")


def test_json_is_plain(capsys, tmp_path):
    out = tmp_path / "p.json"
    assert main(["plan", "--model", "gpt2", "--device", "H100-SXM", "--nodes", "1",
                 "--gpus-per-node", "2", "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr()[0])
    assert printed["recommendation"]["dp"] == 2 and printed["kind"] == "language-model"
