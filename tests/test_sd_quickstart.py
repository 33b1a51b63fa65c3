"""AITune's Stable Diffusion quick start, word for word with the import changed (examples/diffusers/quickstart.py),
on a tiny StableDiffusionPipeline built from configs on the CPU: it inspects, wraps, tunes, generates, saves and
loads into a fresh pipeline; the tuned and the reloaded pipelines' images equal eager's within 2e-3 (absolute,
pixel values in [0, 1]; Inductor reorders floating-point work, and two denoising steps carry it to the image).

The measurement is shortened (5 confirm rounds, short timings); tune()'s default strategy and its backends
(Inductor and ONNX Runtime on the CPU, each module exported as the pipeline calls it: keywords, None and bool
among them) are the quick start's own. Nothing else of the quick start changes. About 3 to 5 minutes on 2 quiet CPU cores, most of it compiling."""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "diffusers" / "quickstart.py"
PROMPT = "A beautiful landscape with mountains and a lake"
TOLERANCE = 2e-3

pytestmark = pytest.mark.skipif(importlib.util.find_spec("diffusers") is None
                                or importlib.util.find_spec("transformers") is None,
                                reason="needs diffusers and transformers (pip install 'aitune-ray[zoo]')")


def images(pipe) -> np.ndarray:
    with torch.no_grad():
        return pipe(PROMPT, num_inference_steps=2, output_type="np", generator=torch.Generator().manual_seed(0)).images


@pytest.fixture
def short_measurement(monkeypatch):
    """tune()'s default strategy and executor, as the quick start gets them, measuring briefly."""
    import aitune_ray as ait
    from aitune_ray.api import tuning
    from aitune_ray.measure.timing import MeasureConfig

    original = tuning.default_strategy

    def quick_strategy(device):
        strategy = original(device)
        strategy.measure_config = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=10, max_seconds=0.1,
                                                latency_runs=0)
        strategy.deploy_check_rounds = 0
        return strategy

    monkeypatch.setattr(tuning, "default_strategy", quick_strategy)
    monkeypatch.setattr(tuning, "default_executor", lambda device=None, requested=None: ait.InlineExecutor(5))


@pytest.mark.slow
def test_the_quick_start_tunes_saves_and_loads_a_stable_diffusion_pipeline(tmp_path, monkeypatch, short_measurement):
    import aitune_ray as ait
    from aitune_ray.api.module import find_modules

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REPO))
    from examples.diffusers.pipeline import make_pipeline

    eager = images(make_pipeline())
    saved = []
    real_save = ait.save
    monkeypatch.setattr(ait, "save", lambda obj, path, **kw: (saved.append(obj), real_save(obj, path, **kw))[1])

    done = runpy.run_path(str(QUICKSTART), run_name="__main__")

    (tuned,) = saved
    wrapped = find_modules(tuned)
    assert "unet" in wrapped, sorted(wrapped)   # inspect found the UNet, wrap put a Module in its place
    assert (tmp_path / "landscape.png").exists() and (tmp_path / "tuned_pipe.ait").exists()
    reloaded = done["pipe"]
    assert reloaded is not tuned
    assert set(find_modules(reloaded)) == set(wrapped)
    for name, module in find_modules(reloaded).items():   # each restored as tuned: its backend, or eager
        chosen = wrapped[name].backend
        assert (module.backend is None) == (chosen is None), name
        if chosen is not None:
            assert type(module.backend) is type(chosen), name
    for pipe in (tuned, reloaded):
        got = images(pipe)
        assert got.shape == eager.shape == (1, 32, 32, 3)
        assert np.abs(got - eager).max() <= TOLERANCE
    sys.modules.pop("examples.diffusers.quickstart", None)
