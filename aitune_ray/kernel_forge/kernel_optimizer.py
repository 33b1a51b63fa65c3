"""AITune's module path of the KernelOptimizer, with its KernelSource and KernelSourceType names."""

from typing import TypeVar

from aitune_ray.kernel_forge.kernel_provider import KernelGenerator, KernelProvider
from aitune_ray.kernel_forge.optimizer import KernelOptimizer

KernelSource = KernelProvider | KernelGenerator
KernelSourceType = TypeVar("KernelSourceType", KernelProvider, KernelGenerator)

__all__ = ["KernelOptimizer", "KernelSource", "KernelSourceType"]
