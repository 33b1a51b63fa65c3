"""KernelOptimizationPlan: the chosen provider per function, JSON-serializable, and how it is applied.

The replacement is a TorchFunctionMode entered only while the module's forward runs. Torch function
modes live on a per-thread stack, so another thread calling the same functional at the same time
gets the original, and code outside the module's forward is never affected. Dynamo traces through
the mode (torch.compile, strict torch.export) and non-strict torch.export runs it, so a compiled or
exported module captures the replacement kernels.

Only the outermost functional call is replaced: a functional called from inside another one (F.sdpa
inside F.multi_head_attention_forward) belongs to the outer call, as it does in the profiler.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from aitune_ray.errors import ConfigError
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import KernelProvider, kernel_provider_from_dict

if TYPE_CHECKING:
    import pandas as pd

PLAN_VERSION = 1


class ReplacementMode(TorchFunctionMode):
    """Calls the replacement of a torch.nn.functional function, everything else unchanged."""

    def __init__(self, replacements: dict[Callable, Callable]):
        super().__init__()
        self.replacements = replacements

    def __torch_function__(self, func, types, args=(), kwargs=None):
        replacement = self.replacements.get(func)
        if replacement is None:
            return func(*args, **(kwargs or {}))
        return replacement(*args, **(kwargs or {}))


class PlannedModule(nn.Module):
    """module, with the plan's replacements active while its forward runs (for a delegate backend
    to compile or export; the wrapped module itself is left without hooks)."""

    def __init__(self, module: nn.Module, mode: ReplacementMode):
        super().__init__()
        self.module = module
        self._forge_mode = mode

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self._forge_mode:
            return self.module(*args, **kwargs)


def planned_module(module: nn.Module, mode: ReplacementMode) -> PlannedModule:
    """A PlannedModule whose forward has module's signature (torch.export maps inputs and dynamic
    shapes by parameter name)."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return PlannedModule(module, mode)
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self._forge_mode:
            return self.module(*args, **kwargs)

    forward.__signature__ = signature.replace(parameters=[this, *signature.parameters.values()])
    cls = type(PlannedModule.__name__, (PlannedModule,), {"forward": forward, "__module__": __name__,
                                                          "__qualname__": PlannedModule.__qualname__})
    return cls(module, mode)


@dataclasses.dataclass(frozen=True)
class KernelOptimizationPlan:
    """providers: at most one per function. results: every candidate's record (plain data, for reports)."""

    providers: tuple[KernelProvider, ...] = ()
    results: tuple[dict, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "providers", tuple(self.providers))
        object.__setattr__(self, "results", tuple(self.results))
        seen: dict[str, str] = {}
        for provider in self.providers:
            fn = provider.supported_function
            if fn in seen:
                raise ConfigError(f"the plan replaces {fn} twice ({seen[fn]} and {provider.name})")
            if not callable(getattr(F, fn, None)):
                raise ConfigError(f"{provider.name} replaces torch.nn.functional.{fn}, which does not exist")
            if not provider.is_ready:
                raise ConfigError(f"{provider.name} is in a plan but was never prepared")
            seen[fn] = provider.name

    @property
    def is_empty(self) -> bool:
        return not self.providers

    @property
    def functions(self) -> dict[str, str]:
        """Replaced function -> provider name."""
        return {p.supported_function: p.name for p in self.providers}

    def describe(self) -> str:
        if not self.providers:
            return "no replacement"
        return ", ".join(f"{fn} -> {name}" for fn, name in self.functions.items())

    def results_frame(self) -> pd.DataFrame:
        """One row per candidate: function, provider, status, error, relative error, time, speedup, and the
        GPU that timed it."""
        import pandas as pd

        columns = ["function", "description", "status", "max_error", "tolerance", "median_ms", "speedup",
                   "selected", "gpu", "error"]
        rows = [{c: r.get(c) for c in columns} for r in self.results]
        return pd.DataFrame(rows, columns=columns)

    # ----- serialization ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"version": PLAN_VERSION, "providers": [p.to_dict() for p in self.providers],
                "results": [dict(r) for r in self.results]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KernelOptimizationPlan":
        version = data.get("version", PLAN_VERSION)
        if version > PLAN_VERSION:
            raise ConfigError(f"kernel plan version {version} is newer than this aitune-ray reads ({PLAN_VERSION})")
        providers = tuple(kernel_provider_from_dict(p) for p in data.get("providers", []))
        return cls(providers, tuple(data.get("results", [])))

    # ----- applying ---------------------------------------------------------------------------------
    def mode(self) -> ReplacementMode:
        """The torch function mode that swaps in this plan's providers (libraries loaded first)."""
        replacements: dict[Callable, Callable] = {}
        for provider in self.providers:
            provider.load_runtime_dependencies()
            replacements[getattr(F, provider.supported_function)] = provider
        return ReplacementMode(replacements)

    def wrap(self, module: nn.Module) -> nn.Module:
        """module itself for an empty plan, else a PlannedModule around it."""
        return module if self.is_empty else planned_module(module, self.mode())

    def install(self, module: nn.Module) -> list:
        """Hooks that make module's forward (in whichever thread calls it) use the plan's providers; the
        handles, for the caller to remove. None for an empty plan."""
        if not self.providers:
            return []
        mode = self.mode()

        def enter(_module, _args):
            mode.__enter__()

        def leave(_module, _args, _output):
            mode.__exit__(None, None, None)

        handles = [module.register_forward_pre_hook(enter, prepend=True)]
        try:
            handles.append(module.register_forward_hook(leave, always_call=True))
        except Exception:
            handles[0].remove()
            raise
        return handles

    @contextlib.contextmanager
    def apply(self, module: nn.Module) -> Iterator[None]:
        """Inside the block, module's forward (in whichever thread calls it) uses the plan's providers;
        gradients are off, as for inference."""
        handles = self.install(module)
        try:
            with torch.no_grad():
                yield
        finally:
            for handle in handles:
                handle.remove()
