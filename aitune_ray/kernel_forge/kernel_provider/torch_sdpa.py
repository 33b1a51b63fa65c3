"""TorchSDPAKernelProvider: PyTorch's own SDPA, pinned to one backend (flash, cuDNN, efficient, math).

Under torch.compile, the call runs inside torch.nn.attention.sdpa_kernel(backend) (Dynamo honors that
context). torch.export, however, keeps the generic SDPA op, whose backend would be chosen later by
whatever compiles the exported program; so when exporting, the provider calls that backend's own aten op
instead, which pins the kernel into the artifact. prepare() checks on every recorded sample that the
backend's op runs and matches the generic call before it relies on it.

Eagerly, the provider calls that op directly as well: entering sdpa_kernel costs more host time per call
than a short attention kernel takes on a GPU, and a single call's latency includes it. A call the op does
not take (a shape it rejects) falls back to the generic call under sdpa_kernel.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from aitune_ray.errors import ConfigError
from aitune_ray.kernel_forge.function_samples import FunctionSample, fresh_copy
from aitune_ray.kernel_forge.kernel_provider.attention import ATTENTION_TOLERANCES, Unsupported, bind_sdpa
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import SDPA_FUNCTION, KernelProvider

logger = logging.getLogger(__name__)

ALIASES = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "mem_efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def sdpa_backend(value: SDPBackend | str) -> SDPBackend:
    """An SDPBackend from itself, its name ("FLASH_ATTENTION") or a short alias ("flash")."""
    if isinstance(value, SDPBackend):
        return value
    text = str(value)
    if text.lower() in ALIASES:
        return ALIASES[text.lower()]
    backend = getattr(SDPBackend, text.upper(), None)
    if not isinstance(backend, SDPBackend) or text.upper() == "ERROR":
        raise ConfigError(f"unknown SDPA backend {value!r}; use one of {sorted(ALIASES)} or an SDPBackend")
    return backend


def _cuda_op(backend: SDPBackend):
    """(q, k, v, is_causal, scale) -> output through the backend's own CUDA op (no mask, no dropout), or
    None for a backend without one."""
    aten = torch.ops.aten
    if backend == SDPBackend.FLASH_ATTENTION:
        op = aten._scaled_dot_product_flash_attention.default
        return lambda q, k, v, causal, scale: op(q, k, v, 0.0, causal, False, scale=scale)[0]
    if backend == SDPBackend.EFFICIENT_ATTENTION:
        op = aten._scaled_dot_product_efficient_attention.default
        return lambda q, k, v, causal, scale: op(q, k, v, None, False, 0.0, causal, scale=scale)[0]
    if backend == SDPBackend.CUDNN_ATTENTION:
        op = aten._scaled_dot_product_cudnn_attention.default
        return lambda q, k, v, causal, scale: op(q, k, v, None, False, 0.0, causal, False, scale=scale)[0]
    return None


def backend_op_call(backend: SDPBackend, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The SDPA call as the backend's own aten op, or None where that op does not take these arguments."""
    try:
        b = bind_sdpa(args, kwargs)
    except Unsupported:
        return None
    q, k, v, mask, causal, scale = b["query"], b["key"], b["value"], b["attn_mask"], b["is_causal"], b["scale"]
    if float(b["dropout_p"]) != 0.0:
        return None
    aten = torch.ops.aten
    if backend == SDPBackend.MATH:
        return aten._scaled_dot_product_attention_math(q, k, v, mask, 0.0, causal, None, scale=scale,
                                                       enable_gqa=b["enable_gqa"])[0]
    if q.shape[1] != k.shape[1]:
        return None  # grouped-query attention: only the generic call expands the heads
    if backend == SDPBackend.FLASH_ATTENTION and q.device.type == "cpu":
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask, scale=scale)[0]
    op = _cuda_op(backend)
    if mask is not None or op is None:
        return None
    return op(q, k, v, causal, scale)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a64, b64 = a.double(), b.double()
    scale = float(b64.norm()) or 1.0
    return float((a64 - b64).norm()) / scale <= 1e-3


class TorchSDPAKernelProvider(KernelProvider):
    """F.scaled_dot_product_attention pinned to one backend: its own aten op where prepare() found it
    equal to the generic call, else the generic call under torch.nn.attention.sdpa_kernel(backend)."""

    default_tolerances = ATTENTION_TOLERANCES

    def __init__(self, backend: SDPBackend | str = SDPBackend.FLASH_ATTENTION) -> None:
        super().__init__()
        self.backend = sdpa_backend(backend)
        #: Whether torch.export captures the backend's own op (decided in prepare).
        self.pin_op = False

    @property
    def supported_function(self) -> str:
        return SDPA_FUNCTION

    @property
    def name(self) -> str:
        return f"PyTorch SDPA {self.backend.name}"

    def _prepare(self, samples: list[FunctionSample]) -> bool:
        # The backend itself decides what it supports: run every sample once under it.
        pin = bool(samples)
        with sdpa_kernel(self.backend), torch.no_grad():
            for index, sample in enumerate(samples):
                args, kwargs = fresh_copy(sample)
                try:
                    out = F.scaled_dot_product_attention(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - an unsupported backend raises RuntimeError or more
                    return self.unsupported(f"sample {index}: {type(exc).__name__}: {str(exc).strip()[:300]}")
                if pin:
                    try:
                        own = backend_op_call(self.backend, args, kwargs)
                        pin = own is not None and _close(own, out)
                    except Exception as exc:  # noqa: BLE001
                        logger.debug("%s: the backend's own op does not take sample %d: %s", self.name, index, exc)
                        pin = False
        self.pin_op = pin
        if not pin:
            logger.info("%s: torch.export will capture the generic SDPA op for these samples", self.name)
        return True

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        if self.pin_op and not torch.compiler.is_compiling():   # eager
            try:
                out = backend_op_call(self.backend, args, kwargs)
            except RuntimeError as exc:   # the op's own checks reject these inputs
                logger.debug("%s: the backend's own op refused a call (%s); using the generic one", self.name, exc)
                out = None
            if out is not None:
                return out
        elif self.pin_op and torch.compiler.is_exporting():
            out = backend_op_call(self.backend, args, kwargs)
            if out is not None:
                return out
        with sdpa_kernel(self.backend):
            return F.scaled_dot_product_attention(*args, **kwargs)

    def _to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend.name, "pin_op": self.pin_op}

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "TorchSDPAKernelProvider":
        provider = cls(data.get("backend", SDPBackend.FLASH_ATTENTION.name))
        provider.pin_op = bool(data.get("pin_op", False))
        return provider
