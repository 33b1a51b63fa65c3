"""AITune's module path of the KernelOptimizationPlan."""

from aitune_ray.kernel_forge.plan import KernelOptimizationPlan

__all__ = ["KernelOptimizationPlan"]
