"""AITune's kernel-selection quick start with aitune_ray: an attention module whose
F.scaled_dot_product_attention call gets the fastest correct kernel of the installed providers
(PyTorch flash and cuDNN SDPA, FlashAttention-4), then a checkpoint saved and loaded.

    python examples/attention_quickstart.py
    aitune-ray tune examples/attention/job.yaml        # the same as a job file (job_cpu.yaml on a CPU)

On a GPU: (2, 8, 256, 64) fp16. Without one: a smaller float32 shape on the CPU (most providers then
report that they need CUDA, and the module may well stay eager).
"""

import logging
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import KernelSelectorBackend  # noqa: E402
from aitune_ray.report import summary  # noqa: E402
from examples.attention.model import Attention  # noqa: E402  (also the module of examples/attention/job.yaml)

logging.basicConfig(level=logging.WARNING)

if torch.cuda.is_available():
    device, dtype, shape = "cuda", torch.float16, (2, 8, 256, 64)
else:
    device, dtype, shape = "cpu", torch.float32, (1, 4, 64, 32)

# 1. Wrap the module with one backend: kernel selection (the default providers), built with Inductor.
model = ait.Module(Attention().eval(), "attention", strategy=ait.OneBackendStrategy(KernelSelectorBackend()))

# 2. Tune on real inputs: the calls are recorded, profiled, every provider is checked and timed on them.
q, k, v = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
report = ait.tune(model, [(q, k, v)], device=device, call_as_given=True)
print(summary(report))   # the answer first; report.markdown() gives every figure
if model.backend is not None:
    print("kernel plan:", model.backend.plan.describe())

# 3. Save, then load into a fresh module, placed with device_map.
path = Path(tempfile.mkdtemp()) / "attention.ait"
ait.save(model, path)
fresh = ait.load(ait.Module(Attention().eval(), "attention"), path, device_map={"attention": device})
with torch.no_grad():
    expected = F.scaled_dot_product_attention(q, k, v)
    error = (fresh(q, k, v).float() - expected.float()).norm() / expected.float().norm()
print(f"relative L2 error after load: {float(error):.2e}")
