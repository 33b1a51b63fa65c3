"""FlashAttention2KernelProvider: flash_attn.flash_attn_func from the flash-attn package (FA2)."""

from __future__ import annotations

from typing import Any

from aitune_ray.kernel_forge.kernel_provider.attention import (
    AttentionCall, Unsupported, hnd_to_nhd, nhd_to_hnd, parse_call)
from aitune_ray.kernel_forge.kernel_provider.library_attention import LibraryAttentionProvider

MODULE = "flash_attn"
INSTALL = "pip install flash-attn --no-build-isolation"
MAX_HEAD_DIM = 256


class FlashAttention2KernelProvider(LibraryAttentionProvider):
    """SDPA as FlashAttention-2, with the same layout conversion and support rules as FlashAttention-4."""

    label, module_name, install = "FlashAttention-2", MODULE, INSTALL
    kernel_name, distributions = "flash_attn_func", ("flash-attn", "flash_attn")

    def _sample_rule(self, call: AttentionCall) -> None:
        if call.query.shape[-1] > MAX_HEAD_DIM or call.value.shape[-1] != call.query.shape[-1]:
            raise Unsupported(f"FlashAttention-2 needs equal query/value head dims of at most {MAX_HEAD_DIM}")

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        call = parse_call(args, kwargs)
        # FA2 handles grouped-query attention itself when query heads are a multiple of key heads.
        out = self._kernel()(hnd_to_nhd(call.query), hnd_to_nhd(call.key), hnd_to_nhd(call.value),
                             dropout_p=0.0, softmax_scale=call.scale, causal=call.is_causal)
        if isinstance(out, tuple):
            out = out[0]
        return nhd_to_hnd(out)
