"""GPT-2 from the transformers library's own classes, random weights from a config (nothing is downloaded),
called as its users call it: keywords (input_ids, attention_mask, use_cache=False), a CausalLMOutput back.

size="tiny": 2 layers, 64 wide, for CPUs; size="base": GPT-2 small's shape (12 layers, 768 wide).
Needs the transformers extra (pip install 'aitune-ray[transformers]').
"""

from __future__ import annotations

import os


os.environ.setdefault("HF_HUB_OFFLINE", "1")   # a config, never a download

import torch  # noqa: E402

SIZES = {"tiny": dict(n_embd=64, n_layer=2, n_head=2, vocab_size=256),
         "base": dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257)}


def make_model(size: str = "tiny", dtype: str = "float32", seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = GPT2Config(n_positions=256, bos_token_id=0, eos_token_id=0, **SIZES[size])
        return GPT2LMHeadModel(config).eval().to(getattr(torch, dtype))


def make_data(size: str = "tiny", batch_sizes=(1, 2), length: int = 16, seed: int = 1) -> list[dict]:
    """One call per batch size, with the keywords a user passes: token ids, a mask whose last quarter is
    padding, and use_cache=False (no key/value cache: one forward pass over the whole sequence)."""
    generator = torch.Generator().manual_seed(seed)
    items = []
    for bs in batch_sizes:
        ids = torch.randint(0, SIZES[size]["vocab_size"], (bs, length), generator=generator)
        mask = torch.ones(bs, length, dtype=torch.int64)
        mask[:, length - length // 4:] = 0
        items.append({"input_ids": ids, "attention_mask": mask, "use_cache": False})
    return items
