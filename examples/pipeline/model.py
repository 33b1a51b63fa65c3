"""A signal classifier made of two modules, called in turn by a plain Python object.

    aitune-ray tune examples/pipeline/job.yaml
"""

from __future__ import annotations

import torch
from torch import nn


class Encoder(nn.Module):
    """(batch, channels, length) -> (batch, features): two convolutions, then mean over time."""

    def __init__(self, channels: int, features: int):
        super().__init__()
        self.conv1 = nn.Conv1d(channels, features, kernel_size=5, padding=2)
        self.conv2 = nn.Conv1d(features, features, kernel_size=3, padding=1)
        self.norm = nn.LayerNorm(features)

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        x = nn.functional.gelu(self.conv1(signal))
        x = nn.functional.gelu(self.conv2(x))
        return self.norm(x.mean(dim=-1))


class Head(nn.Module):
    """(batch, features) -> (batch, classes) logits."""

    def __init__(self, features: int, classes: int):
        super().__init__()
        self.hidden = nn.Linear(features, features)
        self.out = nn.Linear(features, classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(nn.functional.gelu(self.hidden(features)))


class Pipeline:
    """Not an nn.Module: it holds the two modules and calls them in turn."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        self.encoder = encoder
        self.head = head

    def __call__(self, signal: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(signal))


def make_model(channels: int = 8, features: int = 64, classes: int = 10, seed: int = 0,
               dtype: str = "float32") -> Pipeline:
    """dtype: the parameters' dtype by name (float32, bfloat16, float16)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        kind = getattr(torch, dtype)
        return Pipeline(Encoder(channels, features).eval().to(kind), Head(features, classes).eval().to(kind))


def make_data(batch_sizes=(2, 8), per_batch_size: int = 3, channels: int = 8, length: int = 128,
              seed: int = 1, dtype: str = "float32") -> list[dict]:
    """Items are dicts, passed to the pipeline as keyword arguments."""
    generator = torch.Generator().manual_seed(seed)
    return [{"signal": torch.randn(bs, channels, length, generator=generator).to(getattr(torch, dtype))}
            for bs in batch_sizes for _ in range(per_batch_size)]
