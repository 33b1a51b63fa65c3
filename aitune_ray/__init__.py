"""aitune-ray: NVIDIA AITune's tuning API, with the expensive work run in parallel on Ray.

Change ``import aitune.torch as ait`` to ``import aitune_ray as ait``.
"""

from aitune_ray import backend, tune_strategy
from aitune_ray.inline import InlineExecutor
from aitune_ray.errors import AITuneRayError
from aitune_ray.module import Module, ModuleState
from aitune_ray.tune_strategy import (
    FirstWinsStrategy,
    MaxThroughputStrategy,
    OneBackendStrategy,
    TuneStrategy,
    TuningReport,
)
from aitune_ray.checkpoint import load, save
from aitune_ray.tuning import tune

from aitune_ray.version import __version__

__all__ = [
    "AITuneRayError", "FirstWinsStrategy", "InlineExecutor", "MaxThroughputStrategy", "Module", "ModuleState",
    "OneBackendStrategy", "TuneStrategy", "TuningReport", "backend", "load", "save", "tune", "tune_strategy",
    "__version__",
]


def __getattr__(name):
    if name == "RayExecutor":
        from aitune_ray.cluster.ray_executor import RayExecutor

        return RayExecutor
    raise AttributeError(name)
