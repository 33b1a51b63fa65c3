"""InductorKernelGenerator: compiles one functional alone with Inductor for its recorded samples.

Each generated InductorFunctionKernelProvider wraps ``torch.compile`` of a tiny function that calls
the original torch.nn.functional function (max-autotune on CUDA, the default mode on CPU, static
shapes). Inside another graph capture (torch.compile or torch.export of the whole module) the
provider calls the original function, which that compiler then handles itself.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
import torch.nn.functional as F

from aitune_ray.runtime.frames import own_frame
from aitune_ray.kernel_forge.function_samples import FunctionSample, device_of, fresh_copy
from aitune_ray.kernel_forge.kernel_provider.kernel_generator import KernelGenerationResult, KernelGenerator
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import KernelProvider

logger = logging.getLogger(__name__)

#: What the generator offers by default: pointwise, normalization, softmax and attention functionals.
DEFAULT_FUNCTIONS = ("gelu", "silu", "mish", "layer_norm", "rms_norm", "group_norm", "softmax", "log_softmax",
                     "scaled_dot_product_attention")


def _call_original(function: str):
    """A fresh function calling F.<function>, with its own code object, so its own Dynamo cache."""
    return own_frame(getattr(F, function), f"forge_{function}")


def _capturing() -> bool:
    return bool(torch.compiler.is_compiling() or torch.compiler.is_exporting())


class InductorFunctionKernelProvider(KernelProvider):
    """F.<function> compiled alone by Inductor."""

    def __init__(self, function: str, mode: str | None = None) -> None:
        super().__init__()
        if not callable(getattr(F, function, None)):
            raise ValueError(f"torch.nn.functional has no function {function!r}")
        self.function = function
        self.mode = mode
        self._compiled = None

    @property
    def supported_function(self) -> str:
        return self.function

    @property
    def name(self) -> str:
        return f"Inductor {self.mode or 'default'} {self.function}"

    def _compile(self):
        if self._compiled is None:
            self._compiled = torch.compile(_call_original(self.function), backend="inductor", mode=self.mode,
                                           dynamic=False, fullgraph=True)
        return self._compiled

    def _prepare(self, samples: list[FunctionSample]) -> bool:
        compiled = self._compile()
        for index, sample in enumerate(samples):  # compile now, for every recorded shape
            args, kwargs = fresh_copy(sample)
            try:
                with torch.no_grad():
                    compiled(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a compiler error means this sample is unsupported
                return self.unsupported(f"sample {index}: {type(exc).__name__}: {str(exc).strip()[:300]}")
        return True

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        if _capturing():
            return getattr(F, self.function)(*args, **kwargs)
        return self._compile()(*args, **kwargs)

    def _to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "mode": self.mode}

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "InductorFunctionKernelProvider":
        return cls(data["function"], data.get("mode"))


class InductorKernelGenerator(KernelGenerator):
    """Generates InductorFunctionKernelProvider candidates on a background thread.

    functions: the functionals offered (default DEFAULT_FUNCTIONS). mode: torch.compile mode; None
    picks max-autotune for CUDA samples and the default mode elsewhere.
    """

    def __init__(self, functions: list[str] | tuple[str, ...] | None = None, mode: str | None = None) -> None:
        self.functions = list(functions) if functions is not None else list(DEFAULT_FUNCTIONS)
        self.mode = mode

    def supports_functions(self) -> list[str]:
        return list(self.functions)

    def prepare(self, function: str, samples: list[FunctionSample]) -> bool:
        return function in self.functions and callable(getattr(F, function, None)) and bool(samples)

    def generate(self, function: str, samples: list[FunctionSample]) -> KernelGenerationResult:
        mode = self.mode or ("max-autotune" if device_of(samples).type == "cuda" else None)
        provider = InductorFunctionKernelProvider(function, mode)
        started = time.perf_counter()
        if not provider.prepare(samples):
            return KernelGenerationResult(function, None, provider.name, error=provider.reason)
        seconds = time.perf_counter() - started
        logger.info("compiled %s for %d sample(s) in %.1f s", provider.name, len(samples), seconds)
        return KernelGenerationResult(function, provider, f"{provider.name} (compiled in {seconds:.1f} s)")

    def _to_dict(self) -> dict[str, Any]:
        return {"functions": list(self.functions), "mode": self.mode}
