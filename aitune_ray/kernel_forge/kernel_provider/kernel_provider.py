"""KernelProvider: a replacement for one torch.nn.functional function.

Lifecycle (AITune's contract): a provider starts unprepared; ``prepare(samples)`` checks the
recorded calls of its function and returns True only when it supports every one of them, after
which the provider is callable with the function's own signature. ``to_dict()`` works in either
state (an unprepared provider serializes its configuration, a prepared one also what it chose in
prepare); ``from_dict()`` returns a provider in the state that was saved, so a plan restores ready
providers without seeing any sample again.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from aitune_ray.errors import ConfigError
from aitune_ray.kernel_forge.function_samples import FunctionSample, fit_keywords
from aitune_ray.kernel_forge.kernel_provider.registry import CLASS_KEY, PROVIDERS, TYPE_KEY, class_path
from aitune_ray.measure.correctness import default_tolerance

logger = logging.getLogger(__name__)

SDPA_FUNCTION = "scaled_dot_product_attention"
READY_KEY = "ready"


@functools.lru_cache(maxsize=None)
def _keywords_of(cls: type) -> frozenset | None:
    """The keyword names cls._infer takes (None: any, through **kwargs)."""
    try:
        parameters = inspect.signature(cls._infer).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters
                     if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))


class KernelProviderState(str, enum.Enum):
    INIT = "init"
    READY = "ready"


class KernelProvider(ABC):
    """Base class of kernel providers. Subclasses implement supported_function, _prepare, _infer,
    _to_dict and _from_dict; providers of optional libraries also _load_runtime_dependencies."""

    #: Relative L2 tolerance by output dtype name ("float16"), over the per-dtype default.
    default_tolerances: ClassVar[dict[str, float]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        PROVIDERS.add(cls)

    def __init__(self) -> None:
        self.state = KernelProviderState.INIT
        #: One relative L2 tolerance for every floating output, over default_tolerances; None: those.
        self.tolerance: float | None = None
        #: Why the last prepare() returned False (for reports).
        self.reason = ""

    # ----- identity ----------------------------------------------------------------------
    @property
    @abstractmethod
    def supported_function(self) -> str:
        """Name of the torch.nn.functional function this provider replaces."""

    @property
    def name(self) -> str:
        """A name unique to this provider's configuration."""
        return type(self).__name__

    def __repr__(self) -> str:
        return self.name

    @property
    def is_ready(self) -> bool:
        return getattr(self, "state", KernelProviderState.INIT) is KernelProviderState.READY

    def tolerance_for(self, dtype: torch.dtype) -> float:
        """The relative L2 error this provider may have on an output of dtype."""
        own = getattr(self, "tolerance", None)
        if own is not None and dtype.is_floating_point:
            return float(own)
        name = str(dtype).replace("torch.", "")
        return float(self.default_tolerances.get(name, default_tolerance(dtype)))

    # ----- lifecycle -----------------------------------------------------------------------
    def prepare(self, samples: list[FunctionSample]) -> bool:
        """Get ready for these recorded calls. True only when every sample is supported."""
        if self.is_ready:
            return True
        self.reason = ""
        if not self._prepare([FunctionSample(tuple(a), dict(k)) for a, k in samples]):
            self.reason = getattr(self, "reason", "") or "not every sample is supported"
            return False
        self.state = KernelProviderState.READY
        return True

    def load_runtime_dependencies(self) -> None:
        """Import optional libraries now, before a graph capture runs the provider (Dynamo cannot
        trace an import)."""
        self._load_runtime_dependencies()

    def _load_runtime_dependencies(self) -> None:
        return None

    def unsupported(self, reason: str) -> bool:
        """For _prepare: record why and return False."""
        self.reason = reason
        logger.debug("%s: %s", self.name, reason)
        return False

    @abstractmethod
    def _prepare(self, samples: list[FunctionSample]) -> bool:
        """Check every sample and choose how to call the kernel. Return False if one is unsupported."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.is_ready:
            raise RuntimeError(f"kernel provider {self.name} must be prepared before inference")
        if kwargs:   # called as the caller wrote the call (function_samples.fit_keywords)
            kwargs = fit_keywords(getattr(F, self.supported_function, None), kwargs, _keywords_of(type(self)))
        return self._infer(*args, **kwargs)

    @abstractmethod
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Run the replacement with the replaced function's arguments."""

    # ----- serialization -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON data that recreates this provider (ready if it is ready)."""
        data = {TYPE_KEY: type(self).__name__, CLASS_KEY: class_path(type(self)), READY_KEY: self.is_ready}
        if getattr(self, "tolerance", None) is not None:
            data["tolerance"] = self.tolerance
        data.update(self._to_dict())
        return data

    @abstractmethod
    def _to_dict(self) -> dict[str, Any]:
        """Configuration and, once prepared, the choices made in _prepare."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KernelProvider":
        target = PROVIDERS.find(data, KernelProvider)
        if cls is not KernelProvider and not issubclass(target, cls):
            raise ConfigError(f"{data.get(TYPE_KEY)!r} is not a {cls.__name__}")
        own = {k: v for k, v in data.items() if k not in (TYPE_KEY, CLASS_KEY, READY_KEY, "tolerance")}
        provider = target._from_dict(own)
        provider.tolerance = data.get("tolerance")
        provider.reason = ""
        provider.state = KernelProviderState.READY if data.get(READY_KEY, True) else KernelProviderState.INIT
        return provider

    @classmethod
    @abstractmethod
    def _from_dict(cls, data: dict[str, Any]) -> "KernelProvider":
        """Recreate from what _to_dict returned (the base class sets the state)."""


def kernel_provider_from_dict(data: dict[str, Any]) -> KernelProvider:
    """Recreate the provider a to_dict() describes, whatever its class."""
    return KernelProvider.from_dict(data)
