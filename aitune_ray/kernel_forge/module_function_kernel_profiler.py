"""AITune's module path of the ModuleFunctionKernelProfiler."""

from aitune_ray.kernel_forge.profiler import ModuleFunctionKernelProfiler

__all__ = ["ModuleFunctionKernelProfiler"]
