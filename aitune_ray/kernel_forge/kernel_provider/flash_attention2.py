"""FlashAttention2KernelProvider: flash_attn.flash_attn_func from the flash-attn package (FA2)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from aitune_ray.kernel_forge.function_samples import FunctionSample
from aitune_ray.kernel_forge.kernel_provider.attention import (
    ATTENTION_TOLERANCES, AttentionCall, Unsupported, check_samples, hnd_to_nhd, import_optional, nhd_to_hnd,
    package_version, parse_call)
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import SDPA_FUNCTION, KernelProvider

MODULE = "flash_attn"
INSTALL = "pip install flash-attn --no-build-isolation"
MAX_HEAD_DIM = 256


@functools.cache
def _library():
    return import_optional(MODULE)


def _head_dim_rule(call: AttentionCall) -> None:
    if call.query.shape[-1] > MAX_HEAD_DIM or call.value.shape[-1] != call.query.shape[-1]:
        raise Unsupported(f"FlashAttention-2 needs equal query/value head dims of at most {MAX_HEAD_DIM}")


class FlashAttention2KernelProvider(KernelProvider):
    """SDPA as FlashAttention-2, with the same layout conversion and support rules as FlashAttention-4."""

    default_tolerances = ATTENTION_TOLERANCES

    @property
    def supported_function(self) -> str:
        return SDPA_FUNCTION

    @property
    def name(self) -> str:
        return f"FlashAttention-2 {package_version(_library(), 'flash-attn', 'flash_attn')}"

    def _kernel(self) -> Callable[..., Any]:
        fn = getattr(_library(), "flash_attn_func", None)
        if not callable(fn):
            raise RuntimeError(f"FlashAttention-2 ({MODULE}) is not available; install it with: {INSTALL}")
        return fn

    def _load_runtime_dependencies(self) -> None:
        self._kernel()

    def _prepare(self, samples: list[FunctionSample]) -> bool:
        if _library() is None:
            return self.unsupported(f"{MODULE} is not installed ({INSTALL})")
        try:
            check_samples(samples, "FlashAttention-2", _head_dim_rule)
        except Unsupported as exc:
            return self.unsupported(str(exc))
        return True

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        call = parse_call(args, kwargs)
        # FA2 handles grouped-query attention itself when query heads are a multiple of key heads.
        out = self._kernel()(hnd_to_nhd(call.query), hnd_to_nhd(call.key), hnd_to_nhd(call.value),
                             dropout_p=0.0, softmax_scale=call.scale, causal=call.is_causal)
        if isinstance(out, tuple):
            out = out[0]
        return nhd_to_hnd(out)

    def _to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "FlashAttention2KernelProvider":
        return cls()
