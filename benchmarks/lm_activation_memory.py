"""Peak activation memory of the real model on this CPU against the formula.

The model is :class:`scalelab.models.model.Transformer` at a reduced width (gpt2 style,
4 layers, hidden 256, 4 heads, vocabulary 512, batch 2), trained one step in fp32 at
sequence 128 to 1,024, with and without per-block activation checkpointing
(``torch.utils.checkpoint``, non-reentrant).

Measured: the peak of the bytes of live tensors the step's operations create, over forward
and backward (a ``TorchDispatchMode`` adds each new storage's bytes when an operation
returns it and takes them off when the storage is freed: activations, their gradients and
transients). The parameters' gradients are left out (they are model state): their
storages, known after backward, are taken out of the log before its peak is read. This is
the allocator's demand, without the caching allocator's slack.

Formula: :func:`scalelab.theory.lm.layer_activation_bytes` per layer and
:func:`~scalelab.theory.lm.head_activation_bytes` for the final norm, head and loss,
adapted to what runs here: 4-byte values, no dropout (no masks), SDPA's fused CPU kernel
for fp32 (``_scaled_dot_product_flash_attention_for_cpu``: no s x s matrix, its 4-byte
log-sum-exp per row and head; its output, laid out (b, s, a, d), is the output
projection's input as a view: kept once), LayerNorm's mean and 1/std (16 bytes per token
for two norms), the log-softmax's output (the logits themselves are not kept). The peak is
reached at the start of backward: the saved activations plus the loss's gradient and the
logits' gradient (2 V values per token). With checkpointing each
block keeps only its input (h per token) and backward recomputes one block at a time: the
peak is the stored inputs plus the larger of the head's phase (its activations and the
loss's gradients) and a block's phase (its full activations and the gradients its
backward holds at once: the one arriving at its output, the residual stream's, and the
norms' inputs', 4 h).

    python benchmarks/lm_activation_memory.py [--out bench-out/lm_activation_memory.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import weakref
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import checkpoint

from scalelab.models.config import TransformerConfig
from scalelab.models.model import build, next_token_loss
from scalelab.theory import lm

CFG = TransformerConfig("bench-gpt", "gpt2", layers=4, hidden=256, heads=4, vocab=512,
                        max_seq=1024, source="reduced width for this benchmark")
BATCH = 2
SEQS = (128, 256, 512, 1024)
GOAL = 0.15


class LiveBytes(TorchDispatchMode):
    """A log of the storages operations create (+bytes) and free (-bytes), in order, each
    allocation with its own number (an address is reused once freed); storages that
    existed before (the parameters, the input) are not counted."""

    def __init__(self, existing: set[int]):
        super().__init__()
        self.events: list[tuple[int, int]] = []
        self.current: dict[int, int] = {}     # address -> its live allocation's number
        self._existing = existing

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            ptr, n = st.data_ptr(), st.nbytes()
            if n == 0 or ptr in self.current or ptr in self._existing:
                continue
            k = len(self.events)
            self.current[ptr] = k
            self.events.append((k, n))
            weakref.finalize(st, self._free, ptr, k, n)
        return out

    def _free(self, ptr: int, k: int, n: int) -> None:
        self.events.append((k, -n))
        if self.current.get(ptr) == k:
            del self.current[ptr]

    def peak(self, leave_out: set[int]) -> int:
        """The peak of the live bytes, the allocations numbered in ``leave_out`` (the
        parameters' gradients, which are model state, not activations) not counted."""
        live = peak = 0
        for k, n in self.events:
            if k not in leave_out:
                live += n
                peak = max(peak, live)
        return peak


def _forward(model, x, ckpt: bool):
    if not ckpt:
        return model(x)
    seq = x.shape[1]
    h = model.tok_emb(x) + model.pos_emb(torch.arange(seq))
    for block in model.blocks.values():
        h = checkpoint(block, h, None, use_reentrant=False)
    return model.head(model.norm(h))


def measure(seq: int, ckpt: bool) -> int:
    torch.manual_seed(0)
    model = build(CFG, seed=0)
    x = torch.randint(0, CFG.vocab, (BATCH, seq))
    existing = {p.untyped_storage().data_ptr() for p in model.parameters()}
    existing.add(x.untyped_storage().data_ptr())
    mode = LiveBytes(existing)
    with mode:
        loss = next_token_loss(_forward(model, x, ckpt), x)
        loss.backward()
    grads = {mode.current[p.grad.untyped_storage().data_ptr()] for p in model.parameters()
             if p.grad.untyped_storage().data_ptr() in mode.current}
    return mode.peak(grads)


def formula(seq: int, ckpt: bool) -> float:
    w, h, v = 4.0, CFG.hidden, CFG.vocab
    layer = lm.layer_activation_bytes(seq, BATCH, h, CFG.heads, CFG.ffn, value_bytes=w,
                                      dropout=False, flash=True, output_copies=1,
                                      norm_stats_bytes=16.0)
    head = lm.head_activation_bytes(seq, BATCH, h, v, w, norm_stats_bytes=8.0)
    sbw = seq * BATCH * w
    loss_grads = 2 * v * sbw
    if not ckpt:
        return CFG.layers * layer + head + loss_grads
    inputs = CFG.layers * h * sbw
    return inputs + max(head + loss_grads, layer + 4 * h * sbw)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench-out/lm_activation_memory.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows, worst = [], 0.0
    for ckpt in (False, True):
        for seq in SEQS:
            got, want = measure(seq, ckpt), formula(seq, ckpt)
            ratio = got / want
            worst = max(worst, abs(ratio - 1))
            rows.append({"seq": seq, "checkpointing": ckpt, "measured_bytes": got,
                         "formula_bytes": want, "ratio": ratio})
            print(f"seq {seq:5d} checkpointing {'on ' if ckpt else 'off'}: measured "
                  f"{got / 2**20:8.2f} MiB, formula {want / 2**20:8.2f} MiB, "
                  f"ratio {ratio:.3f}")
    ok = worst <= GOAL
    print(f"worst |ratio - 1| = {worst:.3f} (goal <= {GOAL:.2f}: {'met' if ok else 'not met'})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": CFG.to_dict(), "batch": BATCH, "rows": rows,
                                    "worst": worst}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
