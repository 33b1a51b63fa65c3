"""Moved to aitune_ray.inline; this name stays only while callers move."""

from aitune_ray.inline import InlineExecutor  # noqa: F401
