"""AITune's profile and PerformanceProfile: one representative input run under torch.profiler, with the time
of every run split between the tuned aitune_ray.Module wrappers, the untuned modules beside them and the rest."""

from aitune_ray.performance.profiling import PerformanceProfile, profile

__all__ = ["PerformanceProfile", "profile"]
