"""AITune's deferred JIT example with the first import changed (examples/jit/deferred.py) on the tiny Stable
Diffusion pipeline on the CPU: nothing is tuned before tune.deferred(); after it, each module called by the
pipeline (text encoder, UNet, the VAE decoder's parts) is tuned beside the program, later calls run on the
chosen backends, and the images equal eager's. The cheapest backend (TorchEagerBackend, chosen whenever it builds
and is correct) keeps it short: the test is about the JIT mode's path through a real pipeline."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import aitune_ray as ait
from aitune_ray.jit import registry
from aitune_ray.jit.patched import ModuleState
from aitune_ray.jit.patcher import Patcher
from aitune_ray.jit.tune import wait
from aitune_ray.measure.timing import MeasureConfig
from tests.jit_helpers import jit_tuning, one_backend, run_example

pytestmark = pytest.mark.skipif(importlib.util.find_spec("diffusers") is None
                                or importlib.util.find_spec("transformers") is None,
                                reason="needs diffusers and transformers")


@pytest.fixture
def jit():
    measure = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=5, max_seconds=0.05, latency_runs=0)
    with jit_tuning(one_backend(ait.backend.TorchEagerBackend(), measure), ait.InlineExecutor(0), None) as config:
        yield config


@pytest.mark.slow
def test_the_deferred_example_tunes_a_stable_diffusion_pipeline_after_the_marker(jit):
    done = run_example("deferred")
    pipe, first, second = done["pipe"], done["first"], done["second"]
    heads = {type(h.__wrapped__).__name__: h for h in registry.heads}
    assert {"CLIPTextModel", "UNet2DConditionModel"} <= set(heads)
    assert heads["UNet2DConditionModel"].samples.calls_seen >= 3   # both passes' denoising steps
    assert wait(600)
    with torch.no_grad():
        third = pipe("A snowy mountain", output_type="np", generator=torch.Generator().manual_seed(0)).images
    for name in ("CLIPTextModel", "UNet2DConditionModel"):
        assert heads[name].state is ModuleState.TUNED, (name, heads[name].info)
        assert heads[name].switched_at_call > 0
    assert Patcher.tuner.builds == len([h for h in registry.heads if h.state is ModuleState.TUNED])
    with torch.no_grad():
        eager = _eager_images(pipe)
    assert np.abs(third - eager).max() <= 1e-4
    assert first.shape == second.shape == third.shape == (1, 32, 32, 3)


def _eager_images(pipe) -> np.ndarray:
    Patcher.unpatch_torch(unpatch_modules=True)   # every call as written
    return pipe("A snowy mountain", output_type="np", generator=torch.Generator().manual_seed(0)).images
