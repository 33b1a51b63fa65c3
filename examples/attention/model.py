"""The attention quick start's module and data: one F.scaled_dot_product_attention call.

    aitune-ray tune examples/attention/job.yaml        # GPU: (2, 8, 256, 64) fp16
    aitune-ray tune examples/attention/job_cpu.yaml    # CPU: a small float32 shape
    python examples/attention_quickstart.py            # the same through the Python API
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def make_model() -> Attention:
    return Attention().eval()


def make_data(shape=(2, 8, 256, 64), dtype: str = "float16", device: str = "auto", items: int = 1,
              seed: int = 0) -> list[tuple]:
    """items (q, k, v) tuples of the given shape; device "auto": CUDA when there is one."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator().manual_seed(seed)
    kind = getattr(torch, dtype)
    return [tuple(torch.randn(tuple(shape), generator=generator).to(device=device, dtype=kind) for _ in range(3))
            for _ in range(items)]
