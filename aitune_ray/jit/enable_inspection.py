"""Importing this module turns JIT inspection on (JITMode.INSPECT, seven levels deep): modules are timed and
described, nothing is tuned; save_report() writes what was seen."""

from pathlib import Path

from aitune_ray.jit import inspection
from aitune_ray.jit.config import JITMode, config
from aitune_ray.jit.patcher import Patcher

config.mode = JITMode.INSPECT
config.max_depth_level = 7
Patcher.patch_torch()


def save_report(path: Path | str, model_name: str = "Model") -> Path:
    """Write the inspection report (HTML, or JSON for a .json path)."""
    return inspection.save_report(path, model_name)
