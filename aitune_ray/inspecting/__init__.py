"""AITune's inspect and wrap: find the modules a pipeline runs and the share of time each takes, then wrap
the chosen ones in aitune_ray.Module where the pipeline holds them, ready for tune()."""

from aitune_ray.inspecting.inspecting import inspect
from aitune_ray.inspecting.module_info import InspectedModulesInfo, ModuleInfo
from aitune_ray.inspecting.wrapping import wrap

__all__ = ["inspect", "wrap", "InspectedModulesInfo", "ModuleInfo"]
