"""A made-up model whose state outweighs its activations: four 512x512 linear blocks
(1.05M parameters, 12.6 MB of fp32 parameters, gradients and SGD momentum)."""

import torch


def wide_mlp(num_classes: int = 10) -> torch.nn.Module:
    blocks = [torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU()) for _ in range(4)]
    return torch.nn.Sequential(torch.nn.Flatten(), *blocks, torch.nn.Linear(512, num_classes))
