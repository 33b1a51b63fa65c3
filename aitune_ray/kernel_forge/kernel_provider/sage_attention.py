"""SageAttentionKernelProvider: sageattention.sageattn (INT8 QK, fp16/fp8 PV)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from aitune_ray.kernel_forge.function_samples import FunctionSample
from aitune_ray.kernel_forge.kernel_provider.attention import (
    ATTENTION_TOLERANCES, Unsupported, check_samples, import_optional, package_version, parse_call)
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import SDPA_FUNCTION, KernelProvider

MODULE = "sageattention"
INSTALL = "pip install sageattention (or build SageAttention 2 from source for the fastest kernels)"


@functools.cache
def _library():
    return import_optional(MODULE)


class SageAttentionKernelProvider(KernelProvider):
    """SDPA as SageAttention on (B,H,S,D) inputs (tensor_layout "HND", no copy). Quantized QK: its
    fp16/bf16 tolerance is 2e-2 relative L2 (measured about 1.3e-2 on an H200)."""

    default_tolerances = ATTENTION_TOLERANCES

    @property
    def supported_function(self) -> str:
        return SDPA_FUNCTION

    @property
    def name(self) -> str:
        return f"SageAttention {package_version(_library(), 'sageattention')}"

    def _kernel(self) -> Callable[..., Any]:
        fn = getattr(_library(), "sageattn", None)
        if not callable(fn):
            raise RuntimeError(f"SageAttention is not available; install it with: {INSTALL}")
        return fn

    def _load_runtime_dependencies(self) -> None:
        self._kernel()

    def _prepare(self, samples: list[FunctionSample]) -> bool:
        if _library() is None:
            return self.unsupported(f"{MODULE} is not installed ({INSTALL})")
        try:
            check_samples(samples, "SageAttention")
        except Unsupported as exc:
            return self.unsupported(str(exc))
        return True

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        call = parse_call(args, kwargs)
        options: dict[str, Any] = {"tensor_layout": "HND", "is_causal": call.is_causal}
        if call.scale is not None:
            options["sm_scale"] = call.scale
        out = self._kernel()(call.query, call.key, call.value, **options)
        return out[0] if isinstance(out, tuple) else out

    def _to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "SageAttentionKernelProvider":
        return cls()
