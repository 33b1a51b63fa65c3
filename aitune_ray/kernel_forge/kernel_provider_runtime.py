"""KernelProviderRuntime: a plan's replacements switched on and off for one module (AITune's name).

activate() enters KernelOptimizationPlan.apply(module), deactivate() leaves it; both may be called twice.
"""

from __future__ import annotations

from torch import nn

from aitune_ray.kernel_forge.plan import KernelOptimizationPlan


class KernelProviderRuntime:
    def __init__(self, module: nn.Module, plan: KernelOptimizationPlan) -> None:
        self.module = module
        self.plan = plan
        self._applied = None

    @property
    def is_active(self) -> bool:
        return self._applied is not None

    def activate(self) -> None:
        if self._applied is None:
            applied = self.plan.apply(self.module)
            applied.__enter__()
            self._applied = applied

    def deactivate(self) -> None:
        applied, self._applied = self._applied, None
        if applied is not None:
            applied.__exit__(None, None, None)
