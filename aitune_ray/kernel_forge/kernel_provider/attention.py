"""What the attention providers share: SDPA argument parsing, support rules, layouts, tolerances.

PyTorch's scaled_dot_product_attention takes (B, H, S, D) tensors ("HND"); FlashAttention takes
(B, S, H, D) ("NHD"). The external kernels here support no attention mask and no dropout, and
grouped-query attention only when the call asks for it (enable_gqa) and the query heads are a
multiple of the key/value heads.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import logging
from types import ModuleType
from typing import Any

import torch

from aitune_ray.kernel_forge.function_samples import FunctionSample

logger = logging.getLogger(__name__)

#: fp16/bf16 tolerance of attention kernels: admits SageAttention's INT8 QK (about 1.3e-2 relative
#: L2 error), rejects an output a few percent off.
ATTENTION_TOLERANCES = {"float16": 2e-2, "bfloat16": 2e-2}

SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
HALF_DTYPES = (torch.float16, torch.bfloat16)


class Unsupported(ValueError):
    """A sample the kernel cannot run."""


@dataclasses.dataclass(frozen=True)
class AttentionCall:
    """One SDPA call, normalized."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    is_causal: bool
    scale: float | None
    gqa: bool


def bind_sdpa(args: tuple, kwargs: dict) -> dict[str, Any]:
    """SDPA's arguments by parameter name, with defaults filled in."""
    if len(args) == 3 and not kwargs:   # the common call, on every forward: no checks needed
        return {"query": args[0], "key": args[1], "value": args[2], "attn_mask": None, "dropout_p": 0.0,
                "is_causal": False, "scale": None, "enable_gqa": False}
    if len(args) > len(SDPA_PARAMETERS):
        raise Unsupported(f"scaled_dot_product_attention takes at most {len(SDPA_PARAMETERS)} arguments")
    bound = dict(zip(SDPA_PARAMETERS, args))
    for name, value in kwargs.items():
        if name not in SDPA_PARAMETERS:
            raise Unsupported(f"unknown scaled_dot_product_attention argument {name!r}")
        if name in bound:
            raise Unsupported(f"argument {name!r} given twice")
        bound[name] = value
    for name in ("query", "key", "value"):
        if name not in bound:
            raise Unsupported(f"{name} is missing")
    bound.setdefault("attn_mask", None)
    bound.setdefault("dropout_p", 0.0)
    bound.setdefault("is_causal", False)
    bound.setdefault("scale", None)
    bound.setdefault("enable_gqa", False)
    return bound


def parse_call(args: tuple, kwargs: dict) -> AttentionCall:
    """Normalize an SDPA call, raising Unsupported for what the external kernels cannot do."""
    b = bind_sdpa(args, kwargs)
    if b["attn_mask"] is not None:
        raise Unsupported("attn_mask is not supported")
    if float(b["dropout_p"]) != 0.0:
        raise Unsupported("dropout_p must be 0")
    q, k, v = b["query"], b["key"], b["value"]
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise Unsupported("query, key and value must be tensors")
    if not q.dim() == k.dim() == v.dim() == 4:
        raise Unsupported("query, key and value must be 4-D (batch, heads, sequence, head_dim)")
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        raise Unsupported("batch sizes differ")
    if k.shape[2] != v.shape[2] or k.shape[1] != v.shape[1]:
        raise Unsupported("key and value differ in sequence length or heads")
    if q.shape[3] != k.shape[3]:
        raise Unsupported("query and key head dimensions differ")
    gqa = q.shape[1] != k.shape[1]
    if gqa and (not b["enable_gqa"] or q.shape[1] % k.shape[1] != 0):
        raise Unsupported(f"grouped-query attention with {q.shape[1]} query and {k.shape[1]} key heads "
                          "needs enable_gqa=True and a whole number of query heads per key head")
    return AttentionCall(q, k, v, bool(b["is_causal"]), b["scale"], gqa)


def check_device_dtype(call: AttentionCall, what: str) -> None:
    """The external kernels run fp16/bf16 on CUDA only."""
    if call.query.device.type != "cuda":
        raise Unsupported(f"{what} runs on CUDA only, not {call.query.device.type}")
    if call.query.dtype not in HALF_DTYPES or not call.query.dtype == call.key.dtype == call.value.dtype:
        raise Unsupported(f"{what} needs float16 or bfloat16 query, key and value, not {call.query.dtype}")


def check_samples(samples: list[FunctionSample], what: str, extra=None) -> list[AttentionCall]:
    """Parse every sample; Unsupported names the first one that is not."""
    calls = []
    for index, (args, kwargs) in enumerate(samples):
        try:
            call = parse_call(args, kwargs)
            check_device_dtype(call, what)
            if extra is not None:
                extra(call)
        except Unsupported as exc:
            raise Unsupported(f"sample {index}: {exc}") from None
        calls.append(call)
    return calls


def hnd_to_nhd(t: torch.Tensor) -> torch.Tensor:
    """(B, H, S, D) to (B, S, H, D): a view when the data is laid out that way already, else a copy."""
    view = t.transpose(1, 2)
    return view if view.is_contiguous() else view.contiguous()


def nhd_to_hnd(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2)


def import_optional(module_name: str) -> ModuleType | None:
    """Import an optional library, or None when it (or one of its own dependencies) is missing."""
    try:
        return importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - a broken install raises more than ImportError
        logger.debug("cannot import %s: %s", module_name, exc)
        return None


def package_version(module: ModuleType | None, *distributions: str) -> str:
    if module is None:
        return "not installed"
    version = getattr(module, "__version__", None)
    if version and version != "0.0.0":
        return f"v{version}"
    for dist in distributions:
        try:
            return f"v{importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown version"
