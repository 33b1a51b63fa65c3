"""A BERT-style encoder in plain PyTorch: embeddings, then post-norm self-attention layers.

    aitune-ray tune examples/bert/job.yaml

size="base": 12 layers, 768 wide, 12 heads, MLP 3072 (BERT-base). size="tiny": 2 layers, 64 wide, 2 heads,
MLP 256, for CPU tests. Attention is F.scaled_dot_product_attention, so kernel selection can replace it.
Inputs are integer token ids and a 0/1 attention mask; the data does not depend on the model's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {
    "base": dict(layers=12, hidden=768, heads=12, intermediate=3072),
    "tiny": dict(layers=2, hidden=64, heads=2, intermediate=256),
}
VOCAB, MAX_POSITIONS, TYPES = 30522, 512, 2


class Embeddings(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.token = nn.Embedding(VOCAB, hidden)
        self.position = nn.Embedding(MAX_POSITIONS, hidden)
        self.segment = nn.Embedding(TYPES, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.token(input_ids) + self.position(positions)[None]
        if token_type_ids is None:
            x = x + self.segment.weight[0]
        else:
            x = x + self.segment(token_type_ids)
        return self.norm(x)


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=1e-12)
        self.up = nn.Linear(hidden, intermediate)
        self.down = nn.Linear(intermediate, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.norm1(x + self.out(attended.transpose(1, 2).reshape(batch, length, hidden)))
        return self.norm2(x + self.down(F.gelu(self.up(x))))


class Bert(nn.Module):
    """(input_ids, attention_mask[, token_type_ids]) -> (batch, length, hidden) hidden states."""

    def __init__(self, layers: int, hidden: int, heads: int, intermediate: int):
        super().__init__()
        self.embeddings = Embeddings(hidden)
        self.layers = nn.ModuleList(Layer(hidden, heads, intermediate) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embeddings(input_ids, token_type_ids)
        # (batch, 1, 1, length) booleans: True where a key may be attended to.
        mask = attention_mask[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, mask)
        return x


def make_model(size: str = "base", dtype: str = "float32", seed: int = 0) -> Bert:
    """The same weights for the same seed, so a fresh model matches the tuned one."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Bert(**SIZES[size])
        for module in model.modules():  # BERT's initialisation: N(0, 0.02) weights, zero biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
    return model.eval().to(getattr(torch, dtype))


def make_data(size: str = "base", batch_sizes=(8, 32), per_batch_size: int = 2, length: int | None = None,
              seed: int = 1) -> list[dict]:
    """Keyword items {"input_ids", "attention_mask"} at each batch size, per_batch_size of each.

    Length 128 for base, 16 for tiny. Each row is padded after a random length of at least half the
    sequence, so the mask matters.
    """
    length = length or (128 if size == "base" else 16)
    generator = torch.Generator().manual_seed(seed)
    items = []
    for bs in batch_sizes:
        for _ in range(per_batch_size):
            ids = torch.randint(1, VOCAB, (bs, length), generator=generator)
            used = torch.randint(length // 2, length + 1, (bs, 1), generator=generator)
            mask = (torch.arange(length)[None] < used).long()
            items.append({"input_ids": ids * mask, "attention_mask": mask})
    return items
