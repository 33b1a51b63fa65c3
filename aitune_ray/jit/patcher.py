"""Patcher (AITune's name): while patched, every nn.Module made is tracked, and calls of tracked modules go
through their PatchedModule.

Two class attributes of torch.nn.Module are replaced, nothing on the instances: __init__ registers the new
module (unless its class is excluded: torch's own compiler and container classes, this package, and
JITConfig.patch_exclude), and __call__ routes a tracked module's call to its PatchedModule. Modules stay
picklable and copyable as they were, and calls inside torch.compile's tracing, on the tuner's thread, and the
inner call of a module's own call run as written.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
from typing import Callable, Iterator, TypeVar

import torch

from aitune_ray.jit import registry
from aitune_ray.jit.config import JITMode, config
from aitune_ray.jit.patched import PatchedModule
from aitune_ray.jit.tuner import Tuner

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Never tracked, whatever patch_exclude says (it adds to these).
DEFAULT_PATCH_EXCLUDE = (
    "aitune_ray", "torch.jit", "torch._inductor", "torch._dynamo", "torch.fx", "torch.export", "torch.onnx",
    "torch_tensorrt",
    "torch.nn.modules.container.ModuleList", "torch.nn.modules.container.ModuleDict",
    "torch.nn.modules.container.Sequential", "torch.nn.modules.container.ParameterList",
    "torch.nn.modules.container.ParameterDict",
)


def _patched_call(module, *args, **kwargs):
    tracked = registry.tracked.get(id(module))
    if (tracked is None or tracked.__wrapped__ is not module or registry.bypassed()
            or id(module) in registry.inside() or torch.compiler.is_compiling()):
        return Patcher.original_call(module, *args, **kwargs)
    return tracked.call(args, kwargs)


class Patcher:
    original_init: Callable | None = None
    original_call: Callable | None = None
    tuner: Tuner | None = None
    _exit_registered = False

    @classmethod
    def patch_torch(cls) -> None:
        """Track every nn.Module made from now on (idempotent)."""
        if cls.original_init is None:
            cls.original_init = torch.nn.Module.__init__
            original_init = cls.original_init

            def _patched_init(module, *args, **kwargs):
                original_init(module, *args, **kwargs)
                if cls.allowed(type(module)) and id(module) not in registry.tracked:
                    patched = PatchedModule(module)
                    registry.tracked[id(module)] = patched
                    registry.modules.append(patched)

            torch.nn.Module.__init__ = _patched_init
        if cls.original_call is None:
            cls.original_call = torch.nn.Module.__call__
            torch.nn.Module.__call__ = _patched_call
        if cls.tuner is None:
            cls.tuner = PatchedModule.tuner = Tuner()
        if not cls._exit_registered:
            atexit.register(on_python_exit)
            cls._exit_registered = True

    @classmethod
    def unpatch_torch(cls, unpatch_modules: bool = False) -> None:
        """Stop tracking new modules; with unpatch_modules, forget the tracked ones too (calls run as written)."""
        if cls.original_init is not None:
            torch.nn.Module.__init__ = cls.original_init
            cls.original_init = None
        if unpatch_modules:
            registry.tracked.clear()
            if cls.original_call is not None:
                torch.nn.Module.__call__ = cls.original_call
                cls.original_call = None

    @classmethod
    def enable_tune_deferred(cls, enable: bool = True) -> None:
        """Deferred mode: modules with recorded calls are tuned from their next call on (that call recorded)."""
        PatchedModule.deferred_tuning_enabled = enable

    @staticmethod
    def allowed(module_class: type) -> bool:
        exclude = DEFAULT_PATCH_EXCLUDE + tuple(config.patch_exclude)
        if f"{module_class.__module__}.{module_class.__qualname__}" in exclude:
            return False
        name = module_class.__module__
        return not any(name == prefix or name.startswith(prefix + ".") for prefix in exclude)

    @staticmethod
    def intercepted_classes() -> list[str]:
        return sorted({f"{type(m.__wrapped__).__module__}.{type(m.__wrapped__).__name__}" for m in registry.modules})


def on_python_exit() -> None:
    """Say why nothing was tuned, where nothing was; stop the tuner."""
    if Patcher.tuner is not None:
        Patcher.tuner.close()
    if config.mode is JITMode.INSPECT or Patcher.original_call is None:
        return
    if not registry.heads:
        logger.warning("JIT tuning was enabled but no module was called")
    elif not PatchedModule.attempted_tuning:
        if all(len(h.samples) < config.min_samples for h in registry.heads):
            logger.warning("JIT tuning needs %d recorded calls of a module (jit_config.min_samples); no top "
                           "module had that many", config.min_samples)
        elif config.min_samples > 1 and config.batch_axis_required:
            logger.warning("JIT tuning waits for calls at two batch sizes (jit_config.batch_axis_required); "
                           "call the model at two batch sizes or set batch_axis_required = False")


@contextlib.contextmanager
def prepare_for_jit_tuning() -> Iterator[None]:
    """Modules made inside the block are tracked; they stay tracked after it."""
    Patcher.patch_torch()
    try:
        yield
    finally:
        Patcher.unpatch_torch()


def patch_for_jit_tuning(func: Callable[..., T]) -> Callable[..., T]:
    """func, tracking the modules it makes (AITune's decorator)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs) -> T:
        with prepare_for_jit_tuning():
            return func(*args, **kwargs)

    return wrapper


def jit_reset() -> None:
    """Forget every tracked module and restore torch (tests use it for isolation)."""
    Patcher.unpatch_torch(unpatch_modules=True)
    if Patcher.tuner is not None:
        Patcher.tuner.close()
        Patcher.tuner = PatchedModule.tuner = None
    PatchedModule.reset()
