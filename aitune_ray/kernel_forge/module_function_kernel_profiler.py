"""AITune's module path of the ModuleFunctionKernelProfiler."""

from aitune_ray.kernel_forge.profiler import ModuleFunctionKernelProfiler, prime_cuda_profiler

__all__ = ["ModuleFunctionKernelProfiler", "prime_cuda_profiler"]
