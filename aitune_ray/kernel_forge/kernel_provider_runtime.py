"""KernelProviderRuntime: a plan's replacements switched on and off for one module (AITune's name).

activate() installs the plan's hooks on the module (KernelOptimizationPlan.install), deactivate() removes
them; both may be called twice. Unlike plan.apply(), gradients are left as they are.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from torch import nn

from aitune_ray.kernel_forge.plan import KernelOptimizationPlan


class KernelProviderRuntime:
    def __init__(self, module: nn.Module, plan: KernelOptimizationPlan) -> None:
        self.module = module
        self.plan = plan
        for provider in plan.providers:
            provider.load_runtime_dependencies()
        self._handles: list = []

    @property
    def is_active(self) -> bool:
        return bool(self._handles)

    def activate(self) -> None:
        if not self._handles:
            self._handles = self.plan.install(self.module)

    def deactivate(self) -> None:
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Active inside the block; afterwards as it was before."""
        was_active = self.is_active
        self.activate()
        try:
            yield
        finally:
            if not was_active:
                self.deactivate()
