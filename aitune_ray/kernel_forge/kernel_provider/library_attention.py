"""LibraryAttentionProvider: what the SDPA providers backed by an optional library have in common.

A subclass names the library (import name, install hint, kernel attribute, distributions for the version)
and implements `_infer`; the library lookup (imported once per process), the availability check, the
per-sample support check, the name and the (empty) serialized form live here.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, ClassVar

from aitune_ray.kernel_forge.function_samples import FunctionSample
from aitune_ray.kernel_forge.kernel_provider.attention import (
    ATTENTION_TOLERANCES, AttentionCall, Unsupported, check_samples, import_optional, package_version)
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import SDPA_FUNCTION, KernelProvider


_imported = functools.cache(import_optional)


class LibraryAttentionProvider(KernelProvider):
    label: ClassVar[str] = ""
    module_name: ClassVar[str] = ""
    install: ClassVar[str] = ""
    kernel_name: ClassVar[str] = ""
    distributions: ClassVar[tuple[str, ...]] = ()
    default_tolerances = ATTENTION_TOLERANCES

    def _library(self):
        """The imported library, or None when it is missing."""
        return _imported(self.module_name)

    def _sample_rule(self, call: AttentionCall) -> None:
        """Raise Unsupported for a call this library cannot take beyond the common rules."""

    @property
    def supported_function(self) -> str:
        return SDPA_FUNCTION

    @property
    def name(self) -> str:
        return f"{self.label} {package_version(self._library(), *self.distributions)}"

    def _kernel(self) -> Callable[..., Any]:
        fn = getattr(self._library(), self.kernel_name, None)
        if not callable(fn):
            raise RuntimeError(f"{self.label} ({self.module_name}) is not available; install it with: "
                               f"{self.install}")
        return fn

    def _load_runtime_dependencies(self) -> None:
        self._kernel()

    def _prepare(self, samples: list[FunctionSample]) -> bool:
        if self._library() is None:
            return self.unsupported(f"{self.module_name} is not installed ({self.install})")
        try:
            check_samples(samples, self.label, self._sample_rule)
        except Unsupported as exc:
            return self.unsupported(str(exc))
        return True

    def _to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "LibraryAttentionProvider":
        return cls()
