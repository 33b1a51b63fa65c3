"""AITune's deferred JIT example with the first import changed (aitune.torch.jit.enable becomes
aitune_ray.jit.enable), on the tiny Stable Diffusion pipeline of examples/diffusers/pipeline.py (built from
configs, nothing downloaded). Deferred mode suits pipelines that call a module a varying number of times per
step: one full pass is recorded, tune.deferred() marks the safe point, and each module is tuned from its next
call, beside the program.

    pip install 'aitune-ray[zoo,onnx]'
    python examples/jit/deferred.py
"""

# Enable JIT tuning
import aitune_ray.jit.enable  # noqa: F401

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from aitune_ray.jit.config import JITMode, config as jit_config  # noqa: E402
from aitune_ray.jit.tune import deferred as jit_deferred  # noqa: E402
from examples.diffusers.pipeline import make_pipeline  # noqa: E402

jit_config.mode = JITMode.TUNE_DEFERRED

pipe = make_pipeline()
generator = torch.Generator().manual_seed(0)

with torch.no_grad():
    first = pipe("A beautiful landscape", output_type="np", generator=generator).images   # records a full pass
    jit_deferred()                                                                          # enables tuning
    second = pipe("A snowy mountain", output_type="np", generator=generator).images       # tuning starts

if __name__ == "__main__":
    from aitune_ray.jit.patched import PatchedModule
    from aitune_ray.jit.tune import wait

    wait()   # only for this demonstration: the program never needs to wait
    with torch.no_grad():
        third = pipe("A snowy mountain", output_type="np", generator=torch.Generator().manual_seed(0)).images
    PatchedModule.print_hierarchy(print)
