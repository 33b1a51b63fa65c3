"""Importing this module turns JIT tuning off for modules made afterwards (tracked ones go on as they were)."""

from aitune_ray.jit.patcher import Patcher

Patcher.unpatch_torch()
