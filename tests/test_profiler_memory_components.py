"""profile.json's memory by component (counted on meta tensors), and a listed batch that is
not read as a memory limit."""


from scalelab.cli import main
from scalelab.profiler.memory import activation_bytes, memory_components
from scalelab.results import read_json
from scalelab.workload import WorkloadSpec, logits_of

CONV = WorkloadSpec("tests.toy_profiler:small_cnn", input_shape=(3, 16, 16), num_classes=4)


def test_components_are_the_models_counted_on_real_tensors():
    c = memory_components(WorkloadSpec("tests.toy_profiler:small_cnn", input_shape=(3, 16, 16),
                                       num_classes=4, optimizer="adam"))
    model = CONV.build_model()
    n = sum(p.numel() for p in model.parameters())
    assert c["param_count"] == n and c["param_bytes"] == c["grad_bytes"] == 4 * n
    assert c["optimizer_bytes"] == 8 * n  # Adam: two fp32 moments
    loss = CONV.loss_fn()
    real = []
    for b in (3, 5):
        x, y = CONV.synthetic_batch(b)
        real.append(activation_bytes(model, x, lambda o, y=y: loss(logits_of(o), y)))
    assert real[1] - real[0] == 2 * c["activation_bytes_per_sample"]
    assert c["tensor_shapes"] == [list(p.shape) for p in model.parameters()]
    assert sum(c["unit_params"]) <= n
    assert c["input_bytes_per_sample"] == 4 * 3 * 16 * 16 + 8


def test_profile_writes_components_and_a_listed_batch_is_no_memory_limit(tmp_path):
    out = tmp_path / "profile.json"
    assert main(["profile", CONV.model, "--input-shape", "3,16,16", "--num-classes", "4",
                 "--batch-sizes", "2,4", "--algorithms", "none", "--out", str(out),
                 "--quiet"]) == 0
    prof = read_json(out, "profile")
    assert prof["max_batch_size"] == 4 and prof["max_batch_is_memory_limit"] is False
    comp = prof["memory_components"]
    assert comp["param_bytes"] == prof["workload"]["param_bytes"]
    assert comp["activation_bytes_per_sample"] > 0
    from scalelab.plan.inputs import load_profile

    inp = load_profile(out)
    assert inp.max_batch_size is None  # batch 8 is not refused for the list's sake
    assert inp.memory_components == comp


def test_a_model_that_fits_no_batch_is_counted_instead(tmp_path, capsys):
    from scalelab.profiler.memory import too_large_note

    comp = {"param_count": 1000, "param_bytes": 4000, "grad_bytes": 4000,
            "optimizer_bytes": 4000, "activation_bytes_per_sample": 1000,
            "input_bytes_per_sample": 24}
    note = too_large_note(comp, 4024)  # 12,000 bytes of state over 3,000 free per device
    assert "ZeRO-3 needs at least 4 devices of this budget for batch 1" in note
    assert "exceed the budget" in too_large_note(comp, 1000)
    assert too_large_note(None, 1) == ""
    code = main(["profile", CONV.model, "--input-shape", "3,16,16", "--num-classes", "4",
                 "--batch-sizes", "1", "--memory-budget", "1MiB", "--algorithms", "none",
                 "--out", str(tmp_path / "p.json"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "counted on meta tensors it needs parameters" in err[0]
