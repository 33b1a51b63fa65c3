"""aitune-ray: NVIDIA AITune's tuning API, with the expensive work run in parallel on Ray.

Change ``import aitune.torch as ait`` to ``import aitune_ray as ait``.
"""

from aitune_ray.command.early import check_job_file as _check_job_file

_check_job_file()   # the aitune-ray command: a job file that is not there is said before the imports below
from aitune_ray import backend, tune_strategy  # noqa: E402
from aitune_ray.api.absent import aitune_cache_dir, config, snapshot_tuning_data  # noqa: E402
from aitune_ray.jit.config import jit_config  # noqa: E402
from aitune_ray.jit.patched import PatchedModule  # noqa: E402
from aitune_ray.jit.patcher import patch_for_jit_tuning  # noqa: E402
from aitune_ray.checkpoint.storage import LocalTorchStorage
from aitune_ray.model.dataloader import DataLoaderFactory
from aitune_ray.model.dynamic_shapes import BatchDim, DynamicDim
from aitune_ray.kernel_forge.profiler import ModuleFunctionKernelProfiler
from aitune_ray.executors.inline import InlineExecutor
from aitune_ray.inspecting import inspect, wrap
from aitune_ray.performance import PerformanceProfile, profile
from aitune_ray.errors import AITuneRayError
from aitune_ray.api.module import Module, ModuleState
from aitune_ray.tune_strategy import (
    FirstWinsStrategy,
    LatencyBudgetStrategy,
    MaxThroughputStrategy,
    MinLatencyStrategy,
    OneBackendStrategy,
    PerformanceValidationMode,
    TuneStrategy,
    TuningReport,
)
from aitune_ray.checkpoint import load, save
from aitune_ray.api.tuning import tune

from aitune_ray.version import __version__
from aitune_ray import aitune_paths

aitune_paths.install()   # AITune's module paths: aitune.torch.X.Y imports as aitune_ray.X.Y

__all__ = [
    "BatchDim", "DataLoaderFactory", "DynamicDim", "LocalTorchStorage", "ModuleFunctionKernelProfiler",
    "PatchedModule", "PerformanceProfile", "PerformanceValidationMode", "aitune_cache_dir", "config", "inspect",
    "jit_config", "patch_for_jit_tuning", "profile", "snapshot_tuning_data", "wrap",
    "AITuneRayError", "FirstWinsStrategy", "InlineExecutor", "LatencyBudgetStrategy", "MaxThroughputStrategy",
    "MinLatencyStrategy", "Module", "ModuleState",
    "OneBackendStrategy", "TuneStrategy", "TuningReport", "backend", "load", "save", "tune", "tune_strategy",
    "__version__",
]


def __getattr__(name):
    if name == "RayExecutor":
        from aitune_ray.cluster.ray_executor import RayExecutor

        return RayExecutor
    raise AttributeError(name)
