import os

import pytest
import torch

# Tests that want Ray pass a RayExecutor; everything else tunes in-process, without starting Ray per call.
os.environ.setdefault("AITUNE_RAY_EXECUTOR", "inline")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def _block_unloadable_torchvision():
    """A torchvision that cannot load beside this torch (PyPI's CUDA build beside a CPU-only torch, which timm
    pulls in) is made absent before any test imports transformers or diffusers, which use it only where it is."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.helpers import block_unloadable_torchvision

    block_unloadable_torchvision()


_block_unloadable_torchvision()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def sim_clock(monkeypatch):
    """Tune inline on the simulated clock (aitune_ray.testing), from a clean simulated host and back to one."""
    from aitune_ray.measure import timing
    from aitune_ray.testing import SIM_CLOCK, reset

    monkeypatch.setenv("AITUNE_RAY_EXECUTOR", "inline")
    reset()
    with timing.use_clock(SIM_CLOCK):
        yield SIM_CLOCK
    reset()
