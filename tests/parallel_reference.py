"""One process training the same batches as a parallel run: what the parallel runs must equal."""

import torch

from scalelab.models.config import TransformerConfig
from scalelab.models.model import build, next_token_loss
from scalelab.parallel import ParallelLayout
from scalelab.runner.parallel_config import ParallelRunConfig, synthetic_batch

LLAMA = TransformerConfig("tiny", "llama", layers=4, hidden=64, heads=4, kv_heads=2,
                          vocab=128, ffn=128, max_seq=64)
GPT2 = TransformerConfig("tiny-gpt2", "gpt2", layers=4, hidden=64, heads=4, vocab=128,
                         ffn=128, max_seq=64)
GPT2_UNTIED = TransformerConfig("tiny-gpt2-untied", "gpt2", layers=4, hidden=64, heads=4,
                                vocab=128, ffn=128, max_seq=64, tied=False)


def config(model=LLAMA, steps=3, **layout) -> ParallelRunConfig:
    fsdp = layout.pop("fsdp", False)
    return ParallelRunConfig(model=model, layout=ParallelLayout(precision="fp32", **layout),
                             seq_len=16, steps=steps, lr=0.1, momentum=0.9, fsdp=fsdp,
                             warmup_steps=1, timeout_s=30, threads=1)


def one_process(cfg: ParallelRunConfig) -> tuple[list[float], dict]:
    """Every step's loss and the final parameters of plain fp32 SGD in this process."""
    torch.set_num_threads(1)
    model = build(cfg.model, seed=cfg.seed)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    losses = []
    for step in range(cfg.steps):
        tokens = synthetic_batch(cfg, step)
        loss = next_token_loss(model(tokens), tokens)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


def max_differences(result: dict, params_path, cfg) -> tuple[float, float]:
    """(largest loss difference over the steps, largest parameter difference)."""
    ref_losses, ref_params = one_process(cfg)
    got = torch.load(params_path, weights_only=True)
    assert set(got) == set(ref_params), sorted(set(got) ^ set(ref_params))
    assert len(result["losses"]) == cfg.steps
    dl = max(abs(a - b) for a, b in zip(result["losses"], ref_losses, strict=True))
    dp = max(float((got[n] - ref_params[n]).abs().max()) for n in ref_params)
    return dl, dp
