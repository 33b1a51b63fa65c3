"""Executors: where candidate builds run. Only this package talks to Ray, and only lazily."""

from aitune_ray.worker.seam import Executor, RunHandle, TuneContext
from aitune_ray.executors.inline import InlineExecutor

__all__ = ["Executor", "RunHandle", "TuneContext", "InlineExecutor", "RayExecutor", "RayKernelOptimizer"]


def __getattr__(name):
    if name == "RayExecutor":
        from aitune_ray.cluster.ray_executor import RayExecutor

        return RayExecutor
    if name == "RayKernelOptimizer":
        from aitune_ray.cluster.forge import RayKernelOptimizer

        return RayKernelOptimizer
    raise AttributeError(name)
