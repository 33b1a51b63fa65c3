"""AITune's quick start, with one import changed: `import aitune.torch as ait` -> `import aitune_ray as ait`.

    python examples/quickstart.py
"""

import logging

import torch

import aitune_ray as ait

logging.basicConfig(level=logging.INFO)

device = "cuda" if torch.cuda.is_available() else "cpu"

# Any torch model: here a small MLP.
model = torch.nn.Sequential(
    torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128),
).eval().to(device)

# 1. Wrap the module to tune (optionally with a strategy and backends).
strategy = ait.MaxThroughputStrategy([
    ait.backend.TorchInductorJitBackend(),
    ait.backend.ONNXRuntimeBackend(),
])
model = ait.Module(model, "mlp", strategy=strategy)

# 2. Tune on real inputs, as in AITune: each dataset item is one sample, batched at each of batch_sizes.
#    Every call is recorded, then each backend is built, checked and profiled.
dataset = [torch.randn(128, device=device) for _ in range(32)]
report = ait.tune(model, dataset, batch_sizes=[1, 8, 32], max_num_batches_per_batch_size=1, device=device,
                  executor=ait.InlineExecutor())
print(report.markdown())

# 3. Save the tuned module, then load it into a freshly built model.
ait.save(model, "mlp.ait")
fresh = ait.Module(torch.nn.Sequential(
    torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128),
).eval().to(device), "mlp")
fresh = ait.load(fresh, "mlp.ait")

x = torch.randn(8, 128, device=device)   # a batch size that was recorded
print("max abs difference after load:", (fresh(x) - model(x)).abs().max().item())
