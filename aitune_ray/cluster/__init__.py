"""Executors: where candidate builds run. Only this package talks to Ray, and only lazily."""

from aitune_ray.cluster.executor import Executor, RunHandle, TuneContext
from aitune_ray.cluster.inline import InlineExecutor

__all__ = ["Executor", "RunHandle", "TuneContext", "InlineExecutor", "RayExecutor"]


def __getattr__(name):
    if name == "RayExecutor":
        from aitune_ray.cluster.ray_executor import RayExecutor

        return RayExecutor
    raise AttributeError(name)
