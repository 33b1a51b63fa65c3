"""FlashAttention4KernelProvider: flash_attn.cute.flash_attn_func (FlashAttention-4, CuTe DSL)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from aitune_ray.kernel_forge.function_samples import FunctionSample
from aitune_ray.kernel_forge.kernel_provider.attention import (
    ATTENTION_TOLERANCES, Unsupported, check_samples, hnd_to_nhd, import_optional, nhd_to_hnd, package_version,
    parse_call)
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import SDPA_FUNCTION, KernelProvider

MODULE = "flash_attn.cute"
INSTALL = "pip install --pre flash-attn-4"


@functools.cache
def _library():
    return import_optional(MODULE)


class FlashAttention4KernelProvider(KernelProvider):
    """SDPA as FlashAttention-4: (B,H,S,D) inputs become (B,S,H,D); no mask, no dropout, GQA only
    when asked for (enable_gqa) with a whole number of query heads per key head."""

    default_tolerances = ATTENTION_TOLERANCES

    @property
    def supported_function(self) -> str:
        return SDPA_FUNCTION

    @property
    def name(self) -> str:
        return f"FlashAttention-4 {package_version(_library(), 'flash-attn-4', 'fa4')}"

    def _kernel(self) -> Callable[..., Any]:
        fn = getattr(_library(), "flash_attn_func", None)
        if not callable(fn):
            raise RuntimeError(f"FlashAttention-4 ({MODULE}) is not available; install it with: {INSTALL}")
        return fn

    def _load_runtime_dependencies(self) -> None:
        self._kernel()

    def _prepare(self, samples: list[FunctionSample]) -> bool:
        if _library() is None:
            return self.unsupported(f"{MODULE} is not installed ({INSTALL})")
        try:
            check_samples(samples, "FlashAttention-4")
        except Unsupported as exc:
            return self.unsupported(str(exc))
        return True

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        call = parse_call(args, kwargs)
        options: dict[str, Any] = {"causal": call.is_causal}
        if call.scale is not None:
            options["softmax_scale"] = call.scale
        if call.gqa:
            options["pack_gqa"] = False
        out = self._kernel()(hnd_to_nhd(call.query), hnd_to_nhd(call.key), hnd_to_nhd(call.value), **options)
        if isinstance(out, tuple):  # (output, log-sum-exp)
            out = out[0]
        return nhd_to_hnd(out)

    def _to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "FlashAttention4KernelProvider":
        return cls()
