"""Kernel forge: profile which torch.nn.functional calls take the time, find faster kernels for them
(static providers and asynchronous generators), validate and time every candidate on the recorded
calls, and apply the winners as a KernelOptimizationPlan."""

from aitune_ray.kernel_forge.evaluate import benchmark_original, benchmark_provider, run_generator
from aitune_ray.kernel_forge.function_samples import FunctionData, FunctionSample, benchmark_mix
from aitune_ray.kernel_forge.kernel_provider import (
    FlashAttention2KernelProvider, FlashAttention4KernelProvider, InductorFunctionKernelProvider,
    InductorKernelGenerator, KernelGenerationResult, KernelGenerator, KernelProvider, KernelProviderState,
    SageAttentionKernelProvider, TorchSDPAKernelProvider, kernel_generator_from_dict, kernel_provider_from_dict)
from aitune_ray.kernel_forge.kernel_provider_runtime import KernelProviderRuntime
from aitune_ray.kernel_forge.kernel_utils import KernelUtils
from aitune_ray.kernel_forge.optimizer import KernelOptimizer
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan
from aitune_ray.kernel_forge.profiler import ModuleFunctionKernelProfiler
from aitune_ray.kernel_forge.records import GenerationOutcome, ProviderBenchmark

__all__ = [
    "FlashAttention2KernelProvider", "FlashAttention4KernelProvider", "FunctionData", "FunctionSample",
    "GenerationOutcome", "InductorFunctionKernelProvider", "InductorKernelGenerator", "KernelGenerationResult",
    "KernelGenerator", "KernelOptimizationPlan", "KernelOptimizer", "KernelProvider", "KernelProviderRuntime",
    "KernelProviderState", "KernelUtils",
    "ModuleFunctionKernelProfiler", "ProviderBenchmark", "SageAttentionKernelProvider", "TorchSDPAKernelProvider",
    "benchmark_mix", "benchmark_original", "benchmark_provider", "kernel_generator_from_dict",
    "kernel_provider_from_dict", "run_generator",
]
