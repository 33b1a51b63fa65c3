"""A BERT encoder built from the transformers library's own classes, with random weights from a config:
nothing is downloaded (the hub is switched off before transformers is imported).

    pip install 'aitune-ray[transformers]'
    aitune-ray tune examples/hf_encoder/job_tiny.yaml

size="base": BERT-base's shape (12 layers, 768 wide, 12 heads). size="tiny": 2 layers, 64 wide, for CPUs.
Attention runs through F.scaled_dot_product_attention (attn_implementation="sdpa"), so kernel selection can
replace it. The module returns the last hidden state, a plain tensor.
"""

from __future__ import annotations

import os

import torch
from torch import nn


os.environ.setdefault("HF_HUB_OFFLINE", "1")   # a config, never a download

SIZES = {
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
    "tiny": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128),
}
VOCAB = 1024


class Encoder(nn.Module):
    """(input_ids, attention_mask) -> (batch, length, hidden): transformers' BertModel, last hidden state."""

    def __init__(self, size: str = "tiny"):
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(vocab_size=VOCAB, max_position_embeddings=512, attn_implementation="sdpa",
                            **SIZES[size])
        self.bert = BertModel(config, add_pooling_layer=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def make_model(size: str = "tiny", dtype: str = "float32", seed: int = 0) -> Encoder:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Encoder(size).eval().to(getattr(torch, dtype))


def make_data(batch_sizes=(2, 8), per_batch_size: int = 2, length: int = 32, seed: int = 1) -> list[dict]:
    """Keyword items: token ids, and a mask whose last quarter is padding."""
    generator = torch.Generator().manual_seed(seed)
    items = []
    for bs in batch_sizes:
        for _ in range(per_batch_size):
            ids = torch.randint(0, VOCAB, (bs, length), generator=generator)
            mask = torch.ones(bs, length, dtype=torch.int64)
            mask[:, length - length // 4:] = 0
            items.append({"input_ids": ids, "attention_mask": mask})
    return items
