"""The staged exchange (host buffers between a worker's device and Gloo), run on the CPU.

A worker on a GPU stages every piece through host memory; with ``stage_host=True`` on the
CPU the same code runs with plain copies, so its results and byte accounting are checked
here: the same parameters as sending in place, and per step one model's worth of bytes each
way across the host link.
"""

import pytest
import torch

from scalelab.runner import RunConfig, run_training
from scalelab.runner.partition import make_layout
from scalelab.runner.stage import Stager
from scalelab.workload import WorkloadSpec

NUMELS = [12, 5, 30]


def _tensors(fill: float):
    return [torch.arange(n, dtype=torch.float32) + fill * (i + 1) for i, n in enumerate(NUMELS)]


def _P(t):
    p = torch.nn.Parameter(t.clone())
    p.grad = t.clone() * 2
    return p


@pytest.mark.parametrize("staged", [False, True])
def test_stager_sends_the_gradient_and_lands_the_parameters(staged):
    layout = make_layout(NUMELS, 2, "tensor", piece_elems=7)
    params = [_P(t) for t in _tensors(1.0)]
    st = Stager(layout.pieces, torch.float32, torch.device("cpu"), staged)
    st.begin_step()
    for piece in layout.pieces:
        buf, event = st.outgoing(piece, params)
        assert event is None
        for t, a, b, o in piece.copies:
            got = buf[o - piece.offset:o - piece.offset + (b - a)]
            assert torch.equal(got, params[t].grad[a:b])
            if staged:  # a copy in the host buffer, never the gradient's own memory
                assert got.data_ptr() != params[t].grad[a:b].data_ptr()
    fresh = _tensors(100.0)
    for piece in layout.pieces:
        target, buffered = st.incoming(piece, params)
        assert buffered or not staged
        for t, a, b, o in piece.copies:
            target[o - piece.offset:o - piece.offset + (b - a)] = fresh[t][a:b]
        if buffered:
            st.land(piece, params)
    st.landed()
    for p, f in zip(params, fresh, strict=True):
        assert torch.equal(p.data, f)
    total = sum(NUMELS) * 4
    assert st.step_bytes() == ({"bytes_staged_d2h": total, "bytes_staged_h2d": total}
                               if staged else {})


def test_a_gpu_worker_must_stage():
    with pytest.raises(ValueError, match="must stage"):
        Stager(make_layout(NUMELS, 1).pieces, torch.float32, torch.device("cuda", 0), False)


@pytest.mark.dist
def test_staged_run_matches_in_place_run_and_accounts_its_bytes():
    spec = WorkloadSpec("tests.toy_runner:convnet", input_shape=(1, 6, 6), num_classes=3,
                        lr=0.05)
    base = dict(workload=spec, workers=2, ps=2, batch_size=4, steps=4, piece_bytes=256,
                device="cpu", threads=1)
    plain = run_training(RunConfig(**base))
    staged = run_training(RunConfig(**base, stage_host=True))
    assert staged["final_param_checksum"] == plain["final_param_checksum"]
    param_bytes = staged["param_bytes"]
    w = staged["bytes_per_step"]["worker"]
    assert w == {"bytes_sent": param_bytes, "bytes_received": param_bytes,
                 "bytes_staged_d2h": param_bytes, "bytes_staged_h2d": param_bytes}
    assert plain["bytes_per_step"]["worker"] == {"bytes_sent": param_bytes,
                                                 "bytes_received": param_bytes}
    # servers stay on the CPU, nothing staged: each moves its half of S_p for 2 workers
    s = staged["bytes_per_step"]["server"]
    assert s == {"bytes_sent": param_bytes, "bytes_received": param_bytes}
    assert staged["config"]["stage_host"] is True and staged["config"]["device"] == "cpu"


class _Event:
    """A stand-in for a CUDA event: done after ``ready_after`` queries, or when waited for."""

    def __init__(self, ready_after: int):
        self.left, self.waited = ready_after, False

    def query(self) -> bool:
        self.left -= 1
        return self.left < 0

    def synchronize(self) -> None:
        self.waited = True
        self.left = -1


def test_staged_pieces_are_sent_in_order_once_their_copies_are_done(monkeypatch):
    from scalelab.runner import ps

    sent = []
    monkeypatch.setattr(ps, "isend", lambda buf, dst, tag: sent.append((tag, dst)) or tag)
    layout = make_layout(NUMELS, 2, "balanced", piece_elems=10)
    w = object.__new__(ps.Worker)
    w.cfg = RunConfig(workload=WorkloadSpec("tests.toy_runner:wide", input_shape=(6,),
                                            num_classes=3), workers=1, ps=2, device="cpu")
    w.async_mode, w.sends = False, []
    p0, p1, p2 = layout.pieces[:3]
    late = _Event(ready_after=5)
    w.staged = [(p0, None, _Event(0)), (p1, None, late), (p2, None, None)]
    w._send_ready(block=False)  # p0 is done, p1 not yet: p2 waits behind it
    assert [t for t, _ in sent] == [p0.index]
    w._send_ready(block=True)  # after backward: wait for every copy
    assert [t for t, _ in sent] == [p0.index, p1.index, p2.index]
    assert late.waited and w.staged == []
    assert [dst for _, dst in sent] == [w.cfg.server_rank(p.server) for p in (p0, p1, p2)]
