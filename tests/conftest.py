import os

import pytest
import torch

# Tests that want Ray pass a RayExecutor; everything else tunes in-process, without starting Ray per call.
os.environ.setdefault("AITUNE_RAY_EXECUTOR", "inline")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(autouse=True, scope="session")
def _run_folder_key(tmp_path_factory):
    """The per-user key that signs run folders (aitune_ray/executors/run_files.py) lives in a folder of the
    test session, not in the home of whoever runs the tests (child processes inherit it)."""
    os.environ["AITUNE_RAY_CONFIG_DIR"] = str(tmp_path_factory.mktemp("config"))


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
