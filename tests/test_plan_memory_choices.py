"""The plan's memory choices add up and can be run: a global batch is micro-batch x
accumulation x ranks exactly, the launch line runs it, plain DDP stays unless a sharded
layout is faster beyond the band or DDP does not fit, recomputation is weighed, and a
ViT's ZeRO-3 units are its encoder blocks."""

import json
import shlex

import pytest

from scalelab.cli import build_parser, main
from scalelab.plan.layouts import layout_memory, sizes_from_components
from scalelab.theory import zero

V100 = "V100-SXM2-16GB"


def _plan(tmp_path, *args, nodes=2, per_node=8):
    wl = tmp_path / "vgg16.toml"  # a step measured on this machine's CPU
    wl.write_text('model = "vgg16"\nbatch_size = 16\nstep_s = 6.0\ndevice = "cpu"\n')
    out = tmp_path / "plan.json"
    assert main(["plan", "--workload", str(wl), "--device", V100, "--nodes", str(nodes),
                 "--gpus-per-node", str(per_node), "--network", "100GbE", "--quiet",
                 "--out", str(out), *args]) == 0
    return json.loads(out.read_text())


def _run_config(launch: str):
    """The RunConfig the launch line's ``scalelab run`` part makes (the run parser)."""
    from scalelab.cli.run import config_from_args

    words = shlex.split(launch.split(" (")[0])
    run = words[words.index("run"):]
    return config_from_args(build_parser().parse_args(run))


@pytest.mark.slow
@pytest.mark.parametrize("nodes,per_node", [(2, 8), (1, 2)])
def test_vgg16_at_global_batch_512_on_v100s_adds_up_and_runs(tmp_path, nodes, per_node):
    plan = _plan(tmp_path, "--global-batch", "512", nodes=nodes, per_node=per_node)
    rec = plan["recommendation"]
    assert rec["micro_batch"] * rec["accumulation"] * rec["gpus"] == 512
    assert rec["global_batch"] == 512 and rec["batch_size"] == rec["micro_batch"]
    cfg = _run_config(rec["launch"])
    assert cfg.workers * cfg.batch_size * cfg.accumulation_steps == 512
    assert cfg.workers == rec["gpus"] and cfg.accumulation_steps == rec["accumulation"]
    memory = [r for r in rec["reasons"] if r.startswith(f"layout {rec['layout']}, recompute")]
    assert len(memory) == 1, rec["reasons"]  # one message for the decision
    if rec["layout"] != "ddp":  # a sharded layout only where it is faster beyond the band
        assert "faster beyond" in memory[0] and "plain DDP's" in memory[0]
    else:
        assert cfg.architecture == "allreduce"
    if per_node == 2:  # 256 per device: more than plain DDP holds (186), so accumulated
        assert rec["accumulation"] > 1 and f"--accumulation-steps {rec['accumulation']}" \
            in rec["launch"]
    fits = [w for w in plan["warnings"] if "does not fit" in w]
    assert len(fits) <= 1, fits  # warnings never say two things about one decision


def test_a_global_batch_that_does_not_divide_says_what_it_becomes():
    from scalelab.plan.global_batch import largest_divisor, split

    assert split(512, 16) == (32, 512) and split(500, 16) == (31, 496)
    assert largest_divisor(256, 186) == 128 and largest_divisor(7, 0) == 0


@pytest.mark.slow
def test_recompute_is_weighed_and_forced_it_launches_with_its_extra_forward(tmp_path):
    plain = _plan(tmp_path, "--global-batch", "512")["recommendation"]
    full = _plan(tmp_path, "--global-batch", "512", "--recompute", "full")["recommendation"]
    assert "+ recompute at micro-batch" in plain["layout_reason"]  # weighed, with its figures
    assert full["recompute"] == "full" and "--recompute full" in full["launch"]
    assert _run_config(full["launch"]).recompute == "full"
    assert full["samples_per_s"] < plain["samples_per_s"]  # one more forward per step


@pytest.mark.parametrize("args,says", [
    (["--global-batch", "0"], "must be > 0"), (["--accumulation-steps", "0"], "must be > 0"),
    (["--accumulation-steps", "x"], "not an integer"),
    (["--recompute", "half"], "invalid choice: 'half'")])
def test_bad_plan_memory_options_are_one_line_exit_2(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--workload", "workload", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and says in err[0], err


@pytest.mark.slow
def test_vit_h_14_zero3_on_16_ranks_holds_what_the_formula_says():
    from scalelab.opcache import memory_components
    from scalelab.workload import WorkloadSpec

    sizes = sizes_from_components(memory_components(WorkloadSpec("vit_h_14")))
    psi, n = sizes.params, 16
    formula = (4 + 4 + 4) * psi / n  # fp32 parameters and gradients, SGD momentum K = 4
    for rank in (0, n - 1):  # each rank's shards of every tensor, as FSDP2 places them
        held = zero.rank_state_bytes(sizes.shapes, n, rank, "zero3").total_bytes
        assert abs(held / formula - 1) < 0.05, (rank, held / formula)
    assert len(sizes.unit_params) >= 32  # the encoder's 32 blocks, each its own unit
    assert max(sizes.unit_params) < 0.04 * psi
    m = layout_memory(sizes, n, "zero3", 1)
    assert abs(m.state.total_bytes / formula - 1) < 1e-9
    # what a rank gathers inside a step: two blocks' parameters and one block's gradient
    assert m.transient_bytes < 0.5 * formula
    ddp = layout_memory(sizes, n, "ddp", 1)
    assert m.fixed_bytes < 0.15 * ddp.fixed_bytes


@pytest.mark.slow
def test_a_batch_size_beside_a_global_batch_fixes_the_micro_batch(tmp_path, capsys):
    rec = _plan(tmp_path, "--global-batch", "512", "--batch-size", "16")["recommendation"]
    # each device's share of 512, as micro-batches of 16
    assert rec["micro_batch"] == 16 and rec["accumulation"] * 16 * rec["gpus"] == 512
    cfg = _run_config(rec["launch"])
    assert (cfg.batch_size, cfg.accumulation_steps) == (16, rec["accumulation"])
    wl = tmp_path / "vgg16.toml"
    capsys.readouterr()
    code = main(["plan", "--workload", str(wl), "--device", V100, "--nodes", "2",  # 24 does
                 "--gpus-per-node", "8", "--network", "100GbE", "--quiet", "--out",  # not
                 str(tmp_path / "bad.json"), "--global-batch", "512", "--batch-size", "24"])
    err = capsys.readouterr().err.strip().splitlines()  # divide 32 per device
    assert code == 2 and len(err) == 1 and "micro-batch 24" in err[0], err
