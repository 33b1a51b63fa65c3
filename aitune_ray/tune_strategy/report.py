"""The report model's old import path: it lives in aitune_ray.report.model (below the strategies, which fill
it, and beside the report's renderers, which read it). Code that imports it from here keeps working."""

from aitune_ray.report.model import EAGER_MOVED, SPEEDUP_MOVED, ModuleReport, TuningReport, describe_candidate

__all__ = ["EAGER_MOVED", "SPEEDUP_MOVED", "ModuleReport", "TuningReport", "describe_candidate"]
