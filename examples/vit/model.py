"""A ViT-B/16-sized image encoder in plain PyTorch: patch embedding, class token, pre-norm attention layers.

    aitune-ray tune examples/vit/job.yaml          # GPU: fp16, batch sizes 8 and 32
    aitune-ray tune examples/vit/job_cpu.yaml      # CPU: the same model at test size

size="base": 224x224 images in 16x16 patches (196 patches + the class token = 197 tokens), 12 layers,
768 wide, 12 heads, MLP 3072 (ViT-B/16). size="tiny": 32x32 images in 8x8 patches (17 tokens), 2 layers,
64 wide, 4 heads, MLP 128, for CPU tests. Attention is F.scaled_dot_product_attention, so kernel
selection can replace it. The output is the final-norm hidden states, (batch, tokens, width).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {
    "base": dict(image=224, patch=16, layers=12, width=768, heads=12, mlp=3072),
    "tiny": dict(image=32, patch=8, layers=2, width=64, heads=4, mlp=128),
}


class Block(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, width: int, heads: int, mlp: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.fc1 = nn.Linear(width, mlp)
        self.fc2 = nn.Linear(mlp, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, tokens, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, tokens, width))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    """(batch, 3, image, image) images -> (batch, 1 + (image / patch)^2, width) hidden states."""

    def __init__(self, image: int, patch: int, layers: int, width: int, heads: int, mlp: int):
        super().__init__()
        self.patches = nn.Conv2d(3, width, kernel_size=patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.position = nn.Parameter(torch.zeros(1, 1 + (image // patch) ** 2, width))
        self.blocks = nn.ModuleList(Block(width, heads, mlp) for _ in range(layers))
        self.norm = nn.LayerNorm(width, eps=1e-6)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patches(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def make_model(size: str = "base", dtype: str = "float16", seed: int = 0) -> ViT:
    """The same weights for the same seed (truncated-normal-like N(0, 0.02) weights, zero biases)."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ViT(**SIZES[size])
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)
        nn.init.normal_(model.cls, std=0.02)
        nn.init.normal_(model.position, std=0.02)
    return model.eval().to(getattr(torch, dtype))


def make_data(size: str = "base", batch_sizes=(8, 32), per_batch_size: int = 2, dtype: str = "float16",
              seed: int = 1) -> list[torch.Tensor]:
    """Image batches (normalized pixel values) at each batch size, per_batch_size of each, seeded."""
    image = SIZES[size]["image"]
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(bs, 3, image, image, generator=generator).to(getattr(torch, dtype))
            for bs in batch_sizes for _ in range(per_batch_size)]
