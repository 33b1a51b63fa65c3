"""FlashAttention4KernelProvider: flash_attn.cute.flash_attn_func (FlashAttention-4, CuTe DSL)."""

from __future__ import annotations

from typing import Any

from aitune_ray.kernel_forge.kernel_provider.attention import hnd_to_nhd, nhd_to_hnd, parse_call
from aitune_ray.kernel_forge.kernel_provider.library_attention import LibraryAttentionProvider

MODULE = "flash_attn.cute"
INSTALL = "pip install --pre flash-attn-4"


class FlashAttention4KernelProvider(LibraryAttentionProvider):
    """SDPA as FlashAttention-4: (B,H,S,D) inputs become (B,S,H,D); no mask, no dropout, GQA only
    when asked for (enable_gqa) with a whole number of query heads per key head."""

    label, module_name, install = "FlashAttention-4", MODULE, INSTALL
    kernel_name, distributions = "flash_attn_func", ("flash-attn-4", "fa4")

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
