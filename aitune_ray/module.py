"""Module: wraps an nn.Module, records its real inputs, tunes it and then calls the chosen backend."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import Backend
from aitune_ray.errors import AITuneRayError, ConfigError, RecordingError
from aitune_ray.recording import ModuleState, note_call, recording_session  # noqa: F401 (re-exported)
from aitune_ray.samples import Sample, SampleStore, batch_size_of, check_recordable, detach_clone

logger = logging.getLogger(__name__)

class Module(nn.Module):
    """AITune's Module: wrap, record, tune, call.

    module: the nn.Module to tune. name: used in reports and checkpoints (default: its class name).
    strategy: a TuneStrategy (default: MaxThroughput over the backends usable on this machine).
    max_samples: the most calls recorded (later calls still run, and are counted).
    """

    def __init__(self, module: nn.Module, name: str | None = None, strategy=None, max_samples: int = 64):
        if not isinstance(module, nn.Module):
            raise ConfigError(f"Module wraps a torch.nn.Module, not {type(module).__name__}")
        if isinstance(module, Module):
            raise ConfigError("this module is already wrapped by aitune_ray.Module")
        super().__init__()
        self.module = module
        self.name = name or type(module).__name__
        self.strategy = strategy
        self.max_samples = max_samples
        self.samples = SampleStore()
        self.state = ModuleState.RECORDING
        self.backend: Backend | None = None
        self.report = None
        self.gpu_kind = ""   # the GPU kind it was tuned for on a cluster of several (RayExecutor gpu_kind)
        self.failure: str = ""

    # ----- calls ----------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        note_call(self)
        if self.state == ModuleState.TUNED:
            return self.backend.infer(*args, **kwargs)
        if self.state == ModuleState.RECORDING:
            return self._record(args, kwargs)
        return self.module(*args, **kwargs)

    def _record(self, args: tuple, kwargs: dict) -> Any:
        self.samples.calls_seen += 1
        if len(self.samples) >= self.max_samples:
            return self.module(*args, **kwargs)
        try:
            check_recordable(args, "args")
            check_recordable(kwargs, "kwargs")
        except TypeError as exc:
            raise RecordingError(f"{self.name}: {exc}") from exc
        inputs = detach_clone((args, kwargs))  # before the call, in case the module mutates its inputs
        with torch.no_grad():
            outputs = self.module(*args, **kwargs)
        try:
            check_recordable(outputs, "output")
        except TypeError as exc:
            raise RecordingError(f"{self.name}: {exc}") from exc
        self.samples.samples.append(Sample(inputs[0], inputs[1], detach_clone(outputs), batch_size_of(args, kwargs)))
        return outputs

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("module"), name)

    # ----- tuning -----------------------------------------------------------------------------
    def tune(self, device=None, executor=None):
        """Tune on the recorded samples. Returns a ModuleReport.

        A module that fails to tune stays eager; the failure is logged and kept in self.failure. The
        strategy's own errors (OneBackendStrategy's failed build or check) are raised after that.
        """
        from aitune_ray.tuning import tune_modules

        report = tune_modules([self], device=device, executor=executor, raise_errors=True)
        return report.modules[0] if report.modules else None

    def use_backend(self, backend: Backend | None) -> None:
        """Route calls to backend (active), or back to eager with None."""
        if self.backend is not None and self.backend is not backend:
            self.backend.deactivate()
        self.backend = backend
        self.state = ModuleState.TUNED if backend is not None else ModuleState.EAGER

    def record(self) -> None:
        """Go back to recording (keeps samples already recorded)."""
        self.use_backend(None)
        self.state = ModuleState.RECORDING

    def stay_eager(self, reason: str) -> None:
        self.use_backend(None)
        self.failure = reason

    def extra_repr(self) -> str:
        chosen = self.backend.describe() if self.backend else "eager"
        return f"name={self.name!r}, state={self.state.value}, backend={chosen}"


def find_modules(obj: Any) -> dict[str, Module]:
    """Wrapped Modules reachable from obj by attribute path ("" for obj itself)."""
    if isinstance(obj, Module):
        return {"": obj}
    found: dict[str, Module] = {}
    if isinstance(obj, nn.Module):
        for path, sub in obj.named_modules():
            if isinstance(sub, Module) and not any(path.startswith(p + ".") for p in found if p):
                found[path] = sub
    elif hasattr(obj, "__dict__"):
        for attr, value in sorted(vars(obj).items()):
            if isinstance(value, nn.Module):
                for path, sub in find_modules_or_none(value).items():
                    found[f"{attr}.{path}" if path else attr] = sub
    if not found:
        raise ConfigError(f"{type(obj).__name__} holds no aitune_ray.Module")
    return found


def find_modules_or_none(obj: Any) -> dict[str, Module]:
    try:
        return find_modules(obj)
    except ConfigError:
        return {}
