"""Kernel providers (one replacement kernel each) and kernel generators. Optional libraries
(flash_attn, sageattention) are imported only when a provider is prepared or named."""

from aitune_ray.kernel_forge.kernel_provider.flash_attention2 import FlashAttention2KernelProvider
from aitune_ray.kernel_forge.kernel_provider.flash_attention4 import FlashAttention4KernelProvider
from aitune_ray.kernel_forge.kernel_provider.inductor_generator import (
    InductorFunctionKernelProvider, InductorKernelGenerator)
from aitune_ray.kernel_forge.kernel_provider.kernel_generator import (
    KernelGenerationResult, KernelGenerator, kernel_generator_from_dict)
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import (
    SDPA_FUNCTION, KernelProvider, KernelProviderState, kernel_provider_from_dict)
from aitune_ray.kernel_forge.kernel_provider.sage_attention import SageAttentionKernelProvider
from aitune_ray.kernel_forge.kernel_provider.torch_sdpa import TorchSDPAKernelProvider

__all__ = [
    "FlashAttention2KernelProvider", "FlashAttention4KernelProvider", "InductorFunctionKernelProvider",
    "InductorKernelGenerator", "KernelGenerationResult", "KernelGenerator", "KernelProvider",
    "KernelProviderState", "SDPA_FUNCTION", "SageAttentionKernelProvider", "TorchSDPAKernelProvider",
    "kernel_generator_from_dict", "kernel_provider_from_dict",
]
