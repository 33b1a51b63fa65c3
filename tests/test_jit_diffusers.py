"""AITune's deferred JIT example with the first import changed (examples/jit/deferred.py) on the tiny Stable
Diffusion pipeline on the CPU: nothing is tuned before tune.deferred(); after it, each module called by the
pipeline (text encoder, UNet, the VAE decoder's parts) is tuned beside the program, later calls run on the
chosen backends, and the images equal eager's. The cheapest backend (TorchEagerBackend, chosen whenever it builds
and is correct) keeps it short: the test is about the JIT mode's path through a real pipeline."""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import aitune_ray as ait
from aitune_ray.jit import registry
from aitune_ray.jit.config import config as jit_config
from aitune_ray.jit.patched import ModuleState
from aitune_ray.jit.patcher import Patcher, jit_reset
from aitune_ray.jit.tune import wait
from aitune_ray.measure.timing import MeasureConfig

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "jit" / "deferred.py"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("diffusers") is None
                                or importlib.util.find_spec("transformers") is None,
                                reason="needs diffusers and transformers")


@pytest.fixture
def jit(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    jit_reset()
    jit_config.reset_to_defaults()
    strategy = ait.OneBackendStrategy(ait.backend.TorchEagerBackend(), measure_config=MeasureConfig(
        warmup_runs=1, min_runs=3, max_runs=5, max_seconds=0.05, latency_runs=0))
    jit_config.strategy = strategy.enable_performance_validation(False)
    jit_config.executor = ait.InlineExecutor(0)
    jit_config.cache_dir = None
    yield jit_config
    jit_reset()
    jit_config.reset_to_defaults()


@pytest.mark.slow
def test_the_deferred_example_tunes_a_stable_diffusion_pipeline_after_the_marker(jit):
    sys.modules.pop("aitune_ray.jit.enable", None)   # its import is what enables JIT tuning, as in a new process
    done = runpy.run_path(str(EXAMPLE), run_name="deferred")
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
