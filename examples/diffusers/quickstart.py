"""AITune 0.6.0's quick start (ahead-of-time tuning of a Stable Diffusion pipeline), word for word with the import
changed (`import aitune.torch as ait` becomes `import aitune_ray as ait`), on the tiny pipeline of
examples/diffusers/pipeline.py in place of stable-diffusion-v1-5, which cannot be downloaded here: its
`from_pretrained(...)` and `pipe.to("cuda")` lines become `make_pipeline()` and `pipe.to(device)`, and the optional
inference function asks for 32 px and 2 steps instead of 1024 px and 10.

    pip install 'aitune-ray[zoo,onnx]'
    python examples/diffusers/quickstart.py      # writes landscape.png and tuned_pipe.ait in this folder
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.diffusers.pipeline import make_pipeline  # noqa: E402

# ----- AITune's quick start from here on --------------------------------------------------------------------

import logging  # noqa: E402

logging.basicConfig(level=logging.INFO, force=True)

# HuggingFace dependencies
import torch  # noqa: E402

# Import AITune
import aitune_ray as ait  # noqa: E402

device = "cuda" if torch.cuda.is_available() else "cpu"

# Initialize pipeline
pipe = make_pipeline()
pipe.to(device)

# Prepare input data
input_data = [{"prompt": "A beautiful landscape with mountains and a lake"}]

# Inspect pipeline to get modules
modules_info = ait.inspect(pipe, input_data)


# Optional: inference function, if you need more control over execution
def infer(prompt):
    return pipe(prompt, width=32, height=32, num_inference_steps=2)


modules_info = ait.inspect(pipe, input_data, inference_function=infer)

# Display modules info
modules_info.describe()

# Wrap modules for tuning
modules = modules_info.get_modules()
pipe = ait.wrap(pipe, modules)

# Tune pipeline
ait.tune(pipe, input_data)

# Run inference on tuned pipeline
images = pipe(["A beautiful landscape with mountains and a lake"])
image = images[0][0]

# Save image for preview
image.save("landscape.png")

ait.save(pipe, "tuned_pipe.ait")

pipe = make_pipeline()
pipe.to(device)
ait.load(pipe, "tuned_pipe.ait")
