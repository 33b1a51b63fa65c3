"""Moved to aitune_ray.executor; this name stays only while callers move."""

from aitune_ray.executor import Executor, RunHandle, TuneContext  # noqa: F401
