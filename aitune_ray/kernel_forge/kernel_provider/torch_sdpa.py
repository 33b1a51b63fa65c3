"""TorchSDPAKernelProvider: PyTorch's own SDPA, pinned to one backend (flash, cuDNN, efficient, math)."""

from __future__ import annotations

import logging
from typing import Any

import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from aitune_ray.errors import ConfigError
from aitune_ray.kernel_forge.function_samples import FunctionSample, fresh_copy
from aitune_ray.kernel_forge.kernel_provider.attention import ATTENTION_TOLERANCES
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


class TorchSDPAKernelProvider(KernelProvider):
    """F.scaled_dot_product_attention under torch.nn.attention.sdpa_kernel(backend)."""

    default_tolerances = ATTENTION_TOLERANCES

    def __init__(self, backend: SDPBackend | str = SDPBackend.FLASH_ATTENTION) -> None:
        super().__init__()
        self.backend = sdpa_backend(backend)

    @property
    def supported_function(self) -> str:
        return SDPA_FUNCTION

    @property
    def name(self) -> str:
        return f"PyTorch SDPA {self.backend.name}"

    def _prepare(self, samples: list[FunctionSample]) -> bool:
        # The backend itself decides what it supports: run every sample once under it.
        with sdpa_kernel(self.backend):
            for index, sample in enumerate(samples):
                args, kwargs = fresh_copy(sample)
                try:
                    F.scaled_dot_product_attention(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - an unsupported backend raises RuntimeError or more
                    return self.unsupported(f"sample {index}: {type(exc).__name__}: {str(exc).strip()[:300]}")
        return True

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with sdpa_kernel(self.backend):
            return F.scaled_dot_product_attention(*args, **kwargs)

    def _to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend.name}

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "TorchSDPAKernelProvider":
        return cls(data.get("backend", SDPBackend.FLASH_ATTENTION.name))
