"""aitune-ray: NVIDIA AITune's tuning API, with the expensive work run in parallel on Ray.

Change ``import aitune.torch as ait`` to ``import aitune_ray as ait``.

The public names are imported on first use (PEP 562), so that ``import aitune_ray`` and the command's first
checks (a job file that is not there, a path it cannot write) cost no torch import.
"""

from aitune_ray.version import __version__


def _public_names() -> dict:
    """Every public name, imported."""
    import importlib

    backend = importlib.import_module("aitune_ray.backend")   # not "from aitune_ray import": that asks
    tune_strategy = importlib.import_module("aitune_ray.tune_strategy")   # __getattr__ below, which calls here
    from aitune_ray.api.absent import (PatchedModule, aitune_cache_dir, config, jit_config, patch_for_jit_tuning,
                                       snapshot_tuning_data)
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

    return {name: value for name, value in locals().items() if name in __all__}


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
    if name in __all__:
        globals().update(_public_names())
        return globals()[name]
    raise AttributeError(f"module 'aitune_ray' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
