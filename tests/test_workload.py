from pathlib import Path

import pytest
import torch

from scalelab.errors import UsageError
from scalelab.opcount import describe
from scalelab.workload import WorkloadSpec, check_workload, logits_of, parse_input_shape


def test_known_parameter_counts():
    # Published counts for torchvision's models at 1000 classes.
    assert describe(WorkloadSpec("alexnet"), flops=False).param_count == 61_100_840
    assert describe(WorkloadSpec("resnet50"), flops=False).param_count == 25_557_032


def test_param_bytes_is_sum_of_tensor_bytes_fp32():
    info = describe(WorkloadSpec("alexnet"), flops=False)
    assert info.param_bytes == 4 * info.param_count == sum(info.tensor_bytes)
    assert len(info.tensor_bytes) == len(info.tensor_names) == 16
    # fc6 (classifier.1.weight, 9216 x 4096) dominates AlexNet.
    big = info.tensor_names[info.tensor_bytes.index(max(info.tensor_bytes))]
    assert big == "classifier.1.weight"
    assert max(info.tensor_bytes) == 9216 * 4096 * 4


def test_resnet50_flops_per_sample():
    # ResNet-50 forward is 4.09 GMAC = 8.18 GFLOP at 224x224; backward is about twice the
    # forward, so forward+backward is about 3x forward = 24.5 GFLOP (within 3%).
    flops = describe(WorkloadSpec("resnet50")).flops_per_sample
    assert flops == pytest.approx(24.5e9, rel=0.03)


def test_linear_model_flops_exact():
    spec = WorkloadSpec("tests.toy_models:linear", input_shape=(8,), num_classes=4)
    # forward 2*8*4 per sample; backward: grad wrt weight 2*8*4; no input grad needed.
    flops = describe(spec).flops_per_sample
    assert flops == 2 * 8 * 4 * 2


def test_input_shape_parsing():
    assert parse_input_shape("3,64,64") == (3, 64, 64)
    for bad in ["3,a,64", "", "3,0,64", "-1"]:
        with pytest.raises(UsageError):
            parse_input_shape(bad)


def test_unknown_model_suggests_close_names():
    with pytest.raises(UsageError, match="resnet50"):
        WorkloadSpec("resnet5").build_model()


def test_factory_that_does_not_import():
    with pytest.raises(UsageError, match="cannot import"):
        WorkloadSpec("no_such_pkg.mod:make").build_model()


def test_factory_that_returns_a_non_module():
    with pytest.raises(UsageError, match="not a torch.nn.Module"):
        WorkloadSpec("tests.toy_models:not_a_module").build_model()


def test_same_seed_same_init():
    spec = WorkloadSpec("tests.toy_models:mlp", input_shape=(6,), num_classes=3)
    a = torch.nn.utils.parameters_to_vector(spec.build_model(seed=3).parameters())
    b = torch.nn.utils.parameters_to_vector(spec.build_model(seed=3).parameters())
    c = torch.nn.utils.parameters_to_vector(spec.build_model(seed=4).parameters())
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_googlenet_trains_main_head_only():
    spec = WorkloadSpec("googlenet", input_shape=(3, 64, 64), num_classes=10)
    model = spec.build_model()
    x, y = spec.synthetic_batch(2)
    loss = spec.loss_fn()(logits_of(model(x)), y)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_malformed_shapes_are_usage_errors():
    for bad in ["3,x,32", "0,32,32", "3,32,", "3,,32", "3.5,32,32"]:
        with pytest.raises(UsageError, match="input shape"):
            parse_input_shape(bad)
    assert parse_input_shape("3,32") == (3, 32)  # well formed: the model decides


def test_check_workload_runs_the_model_on_meta_tensors():
    from scalelab.workload import check_workload

    check_workload(WorkloadSpec("resnet18", input_shape=(3, 32, 32), num_classes=10))
    for shape in [(3, 32), (1, 32, 32), (3, 32, 32, 32)]:
        with pytest.raises(UsageError, match="does not take --input-shape"):
            check_workload(WorkloadSpec("resnet18", input_shape=shape, num_classes=10))
    with pytest.raises(UsageError, match="does not take --input-shape 7"):
        check_workload(WorkloadSpec("tests.toy_models:mlp", input_shape=(7,), num_classes=3))


def test_check_workload_falls_back_to_cpu_for_ops_without_meta_kernels():
    from scalelab.workload import check_workload

    spec = WorkloadSpec("tests.toy_profiler_models:reads_values", input_shape=(6,),
                        num_classes=3)
    with pytest.raises(Exception):  # noqa: B017 - what meta tensors refuse, whatever its type
        with torch.device("meta"):
            spec.build_model(seed=None)(torch.zeros(2, 6, device="meta"))
    check_workload(spec)
    with pytest.raises(UsageError, match="does not take --input-shape 5"):
        check_workload(WorkloadSpec(spec.model, input_shape=(5,), num_classes=3))


def test_meta_model_builds_a_named_model_once_and_hands_out_copies(monkeypatch):
    from scalelab import meta_build as workload

    monkeypatch.setattr(workload, "_META_MODELS", {})
    builds = []
    real = WorkloadSpec.build_model
    monkeypatch.setattr(WorkloadSpec, "build_model",
                        lambda self, seed=0: builds.append(self.model) or real(self, seed))
    spec = WorkloadSpec("resnet18", num_classes=10)
    a, b = workload.meta_model(spec), workload.meta_model(spec)
    assert builds == ["resnet18"]
    assert a is not b and a.fc.weight is not b.fc.weight
    assert a.fc.weight.is_meta and tuple(a.fc.weight.shape) == (10, 512)
    a.fc = torch.nn.Identity()  # one caller's change reaches no other
    assert isinstance(workload.meta_model(spec).fc, torch.nn.Linear)
    # another class count is another model; a user's factory is called every time
    assert tuple(workload.meta_model(WorkloadSpec("resnet18")).fc.weight.shape) == (1000, 512)
    toy = WorkloadSpec("tests.toy_models:linear", input_shape=(8,), num_classes=4)
    for _ in range(2):
        workload.meta_model(toy)
    assert not toy.named and spec.named
    assert builds == ["resnet18", "resnet18", toy.model, toy.model]


@pytest.mark.parametrize("lr", [0.0, -0.1, float("inf"), float("nan")])
def test_a_learning_rate_that_cannot_train_is_refused(lr):
    with pytest.raises(UsageError, match=r"^--lr must be > 0 and finite, got"):
        WorkloadSpec(model="resnet18", lr=lr)
    assert WorkloadSpec(model="resnet18", lr=0.1).lr == 0.1


def _layout(model: torch.nn.Module) -> list:
    """Everything of a module tree a copy must reproduce, in order."""
    rows = []
    for name, mod in model.named_modules(remove_duplicate=False):
        state = {k: v for k, v in vars(mod).items()
                 if k not in ("_parameters", "_buffers", "_modules")}
        rows.append((name, type(mod), sorted(state), mod.training,
                     [(k, v) for k, v in sorted(state.items())
                      if isinstance(v, (bool, int, float, str, tuple, type(None)))]))
        for kind in ("_parameters", "_buffers"):
            for k, t in getattr(mod, kind).items():
                rows.append((name, kind, k, None if t is None else (
                    type(t), tuple(t.shape), t.stride(), t.dtype, t.requires_grad, t.is_meta)))
    return rows


@pytest.mark.parametrize("name", ["resnet18", "densenet121", "vit_b_16", "mobilenet_v2",
                                  "efficientnet_b0", "inception_v3", "swin_t", "alexnet"])
def test_copy_module_copies_as_deepcopy_does(name):
    import copy

    from scalelab.meta_build import copy_module, meta_model

    with torch.device("meta"):
        original = WorkloadSpec(name).build_model(seed=None)
    original.layer_note = ["kept", 1]  # a mutable attribute: copied, not shared
    ours, theirs = copy_module(original), copy.deepcopy(original)
    assert _layout(ours) == _layout(theirs) == _layout(original)
    assert repr(ours) == repr(original)
    # nothing the copy holds is the original's: modules, tensors, their dictionaries
    mods = {id(m) for m in original.modules()} | {id(t) for t in original.parameters()} | \
        {id(t) for t in original.buffers()}
    assert not mods & ({id(m) for m in ours.modules()} | {id(t) for t in ours.parameters()}
                       | {id(t) for t in ours.buffers()})
    for a, b in zip(original.modules(), ours.modules()):
        assert not {id(v) for v in vars(a).values() if isinstance(v, (dict, list, set))} & \
            {id(v) for v in vars(b).values() if isinstance(v, (dict, list, set))}
    assert ours.layer_note == ["kept", 1] and ours.layer_note is not original.layer_note
    ours.eval()
    assert original.training
    shape = (2, 3, 299, 299) if name == "inception_v3" else (2, 3, 224, 224)
    with torch.device("meta"):
        out = ours(torch.empty(shape))
    assert tuple(out.shape) == (2, 1000)
    assert type(meta_model(WorkloadSpec(name))) is type(original)


def test_copy_module_keeps_shared_tensors_shared_and_hands_odd_classes_to_deepcopy():
    import copy

    from scalelab.meta_build import copy_module

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight
            self.register_buffer("steps", torch.zeros((), dtype=torch.long))
            self.alias = self.steps  # a tensor held twice

    class OwnCopy(torch.nn.Module):
        copies = 0

        def __deepcopy__(self, memo):
            OwnCopy.copies += 1
            return OwnCopy()

    with torch.device("meta"):
        tied = Tied()
    tied.odd = OwnCopy()
    calls = []
    tied.register_forward_hook(lambda *a: calls.append(a))
    new = copy_module(tied)
    assert new.head.weight is new.embed.weight and new.head.weight is not tied.embed.weight
    assert new.alias is new.steps and new.steps is not tied.steps
    assert OwnCopy.copies == 1 and isinstance(new.odd, OwnCopy) and new.odd is not tied.odd
    assert len(new._forward_hooks) == 1 and new._forward_hooks is not tied._forward_hooks
    assert _layout(new) == _layout(copy.deepcopy(tied))


FACTORIES = '''
import torch.nn as nn

SEEN = []


def model(num_classes):
    m = nn.Linear(4, num_classes)
    SEEN.append((nn.init.normal_.__name__, nn.init.normal_(m.weight) is m.weight))
    return m


def failing(num_classes):
    nn.init.zeros_(nn.Linear(2, 2).weight)
    raise RuntimeError("the factory broke")
'''


def test_a_meta_build_skips_the_initializers_and_puts_them_back(tmp_path, monkeypatch):
    import importlib

    import torch.nn.init as init

    from scalelab import meta_build as workload

    (tmp_path / "init_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    factories = importlib.import_module("init_factories")
    real = {name: getattr(init, name) for name in workload._INITIALIZERS}
    assert all(f.__name__ == name for name, f in real.items())

    spec = WorkloadSpec("init_factories:model", input_shape=(4,), num_classes=3)
    meta = workload.meta_model(spec)
    assert factories.SEEN[-1] == ("_unchanged", True) and meta.weight.is_meta
    assert {name: getattr(init, name) for name in real} == real  # put back
    cpu = spec.build_model(seed=0)  # a real build initializes as ever
    assert factories.SEEN[-1] == ("normal_", True) and not cpu.weight.is_meta
    assert torch.equal(cpu.weight, spec.build_model(seed=0).weight)
    assert cpu.weight.std() > 0.3  # normal_(0, 1) ran

    with pytest.raises(UsageError, match="the factory broke"):
        workload.meta_model(WorkloadSpec("init_factories:failing", input_shape=(2,)))
    assert {name: getattr(init, name) for name in real} == real  # put back after a failure

    monkeypatch.setattr(workload, "_META_MODELS", {})
    named = workload.meta_model(WorkloadSpec("resnet18"))
    assert {name: getattr(init, name) for name in real} == real
    assert tuple(named.conv1.weight.shape) == (64, 3, 7, 7) and named.conv1.weight.is_meta


def test_checking_a_model_on_meta_tensors_leaves_torch_dynamo_unimported():
    """On meta tensors cross_entropy's log_softmax is a Python decomposition whose first
    call imports torch._dynamo (seconds): the check runs the loss on CPU zeros of the
    output's shape instead, and still refuses an output the loss does not take."""
    import subprocess
    import sys

    code = ("import sys; from scalelab.workload import WorkloadSpec, check_workload; "
            "check_workload(WorkloadSpec('tests.toy_models:linear', input_shape=(8,), "
            "num_classes=4)); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=str(Path(__file__).resolve().parents[1])).stdout
    assert out.split() == ["False"]


def test_an_output_the_loss_refuses_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "odd_output.py").write_text(
        "from torch import nn\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.l = nn.Linear(8, 12)\n"
        "    def forward(self, x):\n"
        "        return self.l(x).view(2, 3, 4)  # (N, C, d) for a target of shape (N,)\n"
        "def model(num_classes=3):\n"
        "    return M()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match="does not take --input-shape 8"):
        check_workload(WorkloadSpec("odd_output:model", input_shape=(8,), num_classes=3))
