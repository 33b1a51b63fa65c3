"""AITune's just-in-time quick start with the first import changed (aitune.torch.jit.enable becomes
aitune_ray.jit.enable), on a tiny BERT made from a config with random weights (nothing is downloaded).

Run it as a script: python examples/jit/quickstart.py. The first call records the model's inputs and starts
tuning it on a background thread; calls go on eagerly until the verdict, and the call after it runs on the
chosen backend. The next run of the script loads the decision from the cache and starts tuned.
"""

# Enable JIT tuning
import aitune_ray.jit.enable  # noqa: F401

import torch  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification  # noqa: E402

torch.manual_seed(0)   # the same weights every run, as from_pretrained gives (changed weights miss the cache)
config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    vocab_size=100, max_position_embeddings=64)
model = BertForSequenceClassification(config).eval()
inputs = {"input_ids": torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0)),
          "attention_mask": torch.ones(2, 8, dtype=torch.long)}

with torch.no_grad():
    # First call - recording the model's inputs; tuning starts
    first = model(**inputs)
    # Second call - eager while tuning runs, the tuned model once it has finished
    second = model(**inputs)

if __name__ == "__main__":
    from aitune_ray.jit.patched import PatchedModule
    from aitune_ray.jit.tune import wait

    wait()                                  # only for this demonstration: the program never needs to wait
    with torch.no_grad():
        third = model(**inputs)
    PatchedModule.print_hierarchy(print)
    print("max difference from eager:", (third.logits - first.logits).abs().max().item())
