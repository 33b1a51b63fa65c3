"""AITune's quick start, with one import changed: `import aitune.torch as ait` -> `import aitune_ray as ait`.
The README's quick start is this file's code (tests/test_docs.py keeps the two the same).

    python examples/quickstart.py
"""

import torch

import aitune_ray as ait
from aitune_ray.report import summary

device = "cuda" if torch.cuda.is_available() else "cpu"


def make_model():   # any torch model: here a small MLP
    return torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128)).eval().to(device)


# 1. Wrap the module to tune, with a strategy over the backends to try.
model = ait.Module(make_model(), "mlp", strategy=ait.MaxThroughputStrategy([
    ait.backend.TorchInductorJitBackend(),
    ait.backend.ONNXRuntimeBackend(),
]))

# 2. Tune on real inputs, as in AITune: each dataset item is one sample, batched at each of batch_sizes.
#    Every call is recorded, then every backend is built, checked and timed against eager.
dataset = [torch.randn(128, device=device) for _ in range(32)]
report = ait.tune(model, dataset, batch_sizes=[1, 8, 32], max_num_batches_per_batch_size=1, device=device)
print(summary(report))   # the answer first: what to deploy, how much faster at each batch size; then why

# 3. Save the tuned module, then load it into a freshly built model (JIT backends rebuild, AOT ones load).
ait.save(model, "mlp.ait")
fresh = ait.load(ait.Module(make_model(), "mlp"), "mlp.ait")
x = torch.randn(8, 128, device=device)   # a batch size that was recorded
print("max abs difference after load:", (fresh(x) - model(x)).abs().max().item())
