"""A small pre-norm residual MLP: x + W2(gelu(W1(layernorm(x)))), repeated.

    aitune-ray tune examples/mlp/job.yaml
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, expansion: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, width * expansion)
        self.down = nn.Linear(width * expansion, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class MLP(nn.Module):
    def __init__(self, blocks: int, width: int, expansion: int):
        super().__init__()
        self.blocks = nn.Sequential(*(Block(width, expansion) for _ in range(blocks)))
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.blocks(x))


def make_model(blocks: int = 4, width: int = 64, expansion: int = 4, seed: int = 0) -> MLP:
    """The same weights for the same seed, so a fresh model matches the tuned one."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MLP(blocks, width, expansion).eval()


def make_data(batch_sizes=(4, 16), per_batch_size: int = 4, width: int = 64, seed: int = 1) -> list[torch.Tensor]:
    """Inputs at each batch size, per_batch_size of each."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(bs, width, generator=generator) for bs in batch_sizes for _ in range(per_batch_size)]
