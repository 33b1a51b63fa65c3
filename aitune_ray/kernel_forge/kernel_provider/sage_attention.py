"""SageAttentionKernelProvider: sageattention.sageattn (INT8 QK, fp16/fp8 PV)."""

from __future__ import annotations

from typing import Any

from aitune_ray.kernel_forge.kernel_provider.attention import parse_call
from aitune_ray.kernel_forge.kernel_provider.library_attention import LibraryAttentionProvider

MODULE = "sageattention"
INSTALL = "pip install sageattention (or build SageAttention 2 from source for the fastest kernels)"


class SageAttentionKernelProvider(LibraryAttentionProvider):
    """SDPA as SageAttention on (B,H,S,D) inputs (tensor_layout "HND", no copy). Quantized QK: its
    fp16/bf16 tolerance is 2e-2 relative L2 (measured about 1.3e-2 on an H200)."""

    label, module_name, install = "SageAttention", MODULE, INSTALL
    kernel_name, distributions = "sageattn", ("sageattention",)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        call = parse_call(args, kwargs)
        options: dict[str, Any] = {"tensor_layout": "HND", "is_causal": call.is_causal}
        if call.scale is not None:
            options["sm_scale"] = call.scale
        out = self._kernel()(call.query, call.key, call.value, **options)
        return out[0] if isinstance(out, tuple) else out
