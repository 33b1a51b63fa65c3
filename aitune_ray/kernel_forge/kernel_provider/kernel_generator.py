"""KernelGenerator: makes a new provider for a function from its recorded samples, asynchronously.

``submit(function, samples)`` returns a concurrent.futures Future of a KernelGenerationResult (a
provider, or an error). The base class runs ``generate()`` on a daemon thread, so a subclass only
writes the synchronous ``generate``; one with its own machinery (a service, a process pool)
overrides ``submit``. A generator that never finishes is the optimizer's problem (it has a timeout),
and because the thread is a daemon it cannot keep the process alive at exit.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from abc import ABC, abstractmethod
from concurrent.futures import Future
from typing import Any, Callable

from aitune_ray.errors import ConfigError
from aitune_ray.kernel_forge.function_samples import FunctionSample
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import KernelProvider
from aitune_ray.kernel_forge.kernel_provider.registry import CLASS_KEY, GENERATORS, TYPE_KEY, class_path

logger = logging.getLogger(__name__)



@dataclasses.dataclass(frozen=True)
class KernelGenerationResult:
    """One generation: exactly one of a provider (prepared for the samples) or an error."""

    function: str
    provider: KernelProvider | None
    description: str
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.provider is None) == (self.error is None):
            raise ValueError("a KernelGenerationResult holds exactly one of a provider or an error")
        if self.provider is not None and not isinstance(self.provider, KernelProvider):
            raise TypeError(f"provider must be a KernelProvider, not {type(self.provider).__name__}")

    @property
    def succeeded(self) -> bool:
        return self.provider is not None


def run_async(fn: Callable[[], Any], name: str = "kernel-generator") -> Future:
    """Run fn on a daemon thread; its result or exception goes to the returned Future."""
    future: Future = Future()

    def body() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=body, name=name, daemon=True).start()
    return future


class KernelGenerator(ABC):
    """Base class of kernel generators."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        GENERATORS.add(cls)

    @property
    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return self.name

    @abstractmethod
    def supports_functions(self) -> list[str]:
        """The torch.nn.functional functions this generator can make providers for."""

    def prepare(self, function: str, samples: list[FunctionSample]) -> bool:
        """Whether every sample can be handled (checked before submitting)."""
        return function in self.supports_functions()

    def submit(self, function: str, samples: list[FunctionSample]) -> Future:
        """Start one generation without waiting; a Future of a KernelGenerationResult."""
        samples = [FunctionSample(tuple(a), dict(k)) for a, k in samples]
        return run_async(lambda: self.generate(function, samples), f"{self.name}:{function}")

    def generate(self, function: str, samples: list[FunctionSample]) -> KernelGenerationResult:
        """Generate synchronously (what submit runs on its thread)."""
        raise NotImplementedError(f"{self.name} implements neither generate() nor submit()")

    # ----- serialization ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {TYPE_KEY: type(self).__name__, CLASS_KEY: class_path(type(self)), **self._to_dict()}

    def _to_dict(self) -> dict[str, Any]:
        """Configuration (none by default)."""
        return {}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KernelGenerator":
        target = GENERATORS.find(data, KernelGenerator)
        if cls is not KernelGenerator and not issubclass(target, cls):
            raise ConfigError(f"{data.get(TYPE_KEY)!r} is not a {cls.__name__}")
        return target._from_dict({k: v for k, v in data.items() if k not in (TYPE_KEY, CLASS_KEY)})

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "KernelGenerator":
        return cls(**data)


def kernel_generator_from_dict(data: dict[str, Any]) -> KernelGenerator:
    return KernelGenerator.from_dict(data)
