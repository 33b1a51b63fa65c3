"""Backend base class and BackendConfig.

A backend turns an eager module into something faster to call. The base class
owns the lifecycle (build, activate/deactivate, deploy, export for a
checkpoint, restore from one); a subclass implements ``_build`` and ``_infer``,
and an ahead-of-time backend also ``_artifacts`` and ``_load``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import importlib
import json
import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from aitune_ray.errors import BuildError, ConfigError, MissingDependencyError
from aitune_ray.records.imports import class_path, import_class  # noqa: F401 (import_class: for callers)
from aitune_ray.records.registry import BACKENDS
from aitune_ray.model.samples import SampleStore

logger = logging.getLogger(__name__)


def _plain(value: Any) -> Any:
    """Turn enums, dtypes, paths and nested containers into JSON values."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


#: In a config's safe_fields: any value of this field may come from a checkpoint that is not trusted.
SAFE = "any value"


@dataclasses.dataclass
class BackendConfig:
    """Configuration of a backend: a dataclass of plain values."""

    #: What a checkpoint that is not trusted may set (the rule: aitune_ray/checkpoint/config_check.py):
    #: field -> SAFE, a set of allowed option keys, a mapping of key -> rule, a type (bool, int, float, str:
    #: the value's type), or a nested BackendConfig class. A field left out must keep its default. None: a config of the user's own, read by their code.
    safe_fields: ClassVar[dict | None] = None

    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> "BackendConfig":
        """Check the names, then the types and sizes of plain values (aitune_ray.records.validate), then build."""
        from aitune_ray.records.validate import check_plain_fields

        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{cls.__name__} has no field {', '.join(unknown)}; fields: {sorted(known)}")
        check_plain_fields(cls, data, cls.__name__)
        return cls(**data)

    def key(self) -> str:
        """A stable short hash of the config's type and values."""
        text = json.dumps({"type": type(self).__name__, "values": self.to_dict()}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def describe(self) -> str:
        """Only the fields that differ from the defaults, as name=value."""
        default = type(self)().to_dict()
        return ",".join(f"{k}={v}" for k, v in self.to_dict().items() if default.get(k) != v)


class BackendState(str, enum.Enum):
    INIT = "init"
    ACTIVE = "active"
    INACTIVE = "inactive"
    CHECKPOINT_LOADED = "checkpoint_loaded"
    DEPLOYED = "deployed"


def as_it_was(module: nn.Module):
    """A context in which a module that aitune_ray.Module wraps has its own forward and no hooks (its wrapper's
    unpatched()), so that a backend built on it directly, not by tune(), traces the module and not the wrapper's
    proxy; a nullcontext for any other module."""
    proxy = getattr(module, "__dict__", {}).get("forward")
    unpatched = getattr(getattr(proxy, "wrapper", None), "unpatched", None)
    return unpatched() if callable(unpatched) else contextlib.nullcontext()


def require(module_name: str, extra: str, what: str) -> Any:
    """Import an optional library, or raise MissingDependencyError naming the extra to install. OSError too:
    a package whose native libraries are missing (torch_tensorrt without TensorRT's) fails to load that way."""
    from aitune_ray.runtime.quiet import import_quietly

    try:
        return import_quietly(module_name)
    except (ImportError, OSError) as exc:
        raise MissingDependencyError(module_name, extra, what) from exc


class Backend(ABC):
    """Base class of every backend. Subclasses set ``config_class`` and implement ``_build``/``_infer``."""

    config_class: ClassVar[type[BackendConfig]] = BackendConfig
    #: True when a checkpoint stores a recipe that is rebuilt at load, False when it stores an artifact.
    is_jit: ClassVar[bool] = True
    #: Relative L2 tolerance this backend needs by default (quantizing backends), None for the per-dtype one.
    default_tolerance: ClassVar[float | None] = None
    #: Rough relative cost of a build (1 = a default torch.compile). Executors that run builds in
    #: parallel start the costly ones first, so that one long build does not end the schedule alone.
    build_cost: ClassVar[float] = 1.0
    #: Optional distributions this backend needs; a checkpoint records their versions.
    libraries: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every backend class declares what it is; a wrong declaration fails when the class is defined."""
        super().__init_subclass__(**kwargs)
        config = cls.__dict__.get("config_class", cls.config_class)
        if not (isinstance(config, type) and issubclass(config, BackendConfig) and dataclasses.is_dataclass(config)):
            raise TypeError(f"{cls.__name__}.config_class must be a BackendConfig dataclass, not {config!r}")
        checks = {"is_jit": lambda v: isinstance(v, bool), "libraries": lambda v: isinstance(v, tuple) and all(
                  isinstance(x, str) and x for x in v), "build_cost": lambda v: isinstance(v, (int, float)) and v > 0,
                  "default_tolerance": lambda v: v is None or (isinstance(v, (int, float)) and v > 0)}
        for name, valid in checks.items():
            value = getattr(cls, name)
            if not isinstance(value, property) and not valid(value):   # a property decides per instance
                raise TypeError(f"{cls.__name__}.{name} has an invalid value {value!r}")
        BACKENDS.add(cls)

    @classmethod
    def default_config(cls) -> BackendConfig:
        """The config of Backend() without one (a backend whose config has no defaults overrides it)."""
        return cls.config_class()

    def __init__(self, config: BackendConfig | None = None):
        if config is None:
            config = type(self).default_config()
        if not isinstance(config, self.config_class):
            raise ConfigError(f"{type(self).__name__} takes a {self.config_class.__name__}, "
                              f"not {type(config).__name__}")
        self.config = config
        self.state = BackendState.INIT
        self.device: torch.device | None = None

    # ----- identity -----------------------------------------------------------------
    @property
    def name(self) -> str:
        return type(self).__name__

    def key(self) -> str:
        return f"{self.name}-{self.config.key()}"

    def cost_hint(self) -> float:
        """Expected build cost relative to a default torch.compile (a scheduling hint, never a limit)."""
        return self.build_cost

    def describe(self) -> str:
        detail = self.config.describe()
        return f"{self.name}({detail})" if detail else self.name

    def spec(self) -> dict:
        """Plain data that recreates this backend unbuilt in another process."""
        return {"type": class_path(type(self)), "config": self.config.to_dict()}

    def to_dict(self) -> dict:
        """AITune's to_dict(): what recreates this backend, as plain data: its spec, and once built its JSON state,
        device and artifact files (paths; AITune's ArtifactPath values)."""
        data: dict[str, Any] = {"spec": self.spec()}
        if self.state is not BackendState.INIT:
            state, artifacts = self.export()
            data.update(state=state, device=None if self.device is None else str(self.device),
                        artifacts={name: str(path) for name, path in artifacts.items()})
        return data

    @classmethod
    def from_dict(cls, module: nn.Module | None, state_dict: dict, workdir: Path | None = None) -> "Backend":
        """AITune's from_dict(module, state_dict): the backend to_dict() describes, restored on module (built
        again from its recipe, or loaded from its artifact files) when it was built, else unbuilt. For data this
        program wrote: a checkpoint is read by aitune_ray.load, which checks what it loads."""
        backend = Backend.from_spec(state_dict["spec"])
        if cls is not Backend and not isinstance(backend, cls):
            raise ConfigError(f"{state_dict['spec'].get('type')!r} is not a {cls.__name__}")
        if "state" in state_dict:
            if module is None:
                raise ConfigError(f"{backend.name}.from_dict needs the module it was built for to restore it")
            from aitune_ray.runtime import tempdirs

            where = Path(workdir) if workdir is not None else Path(tempdirs.make("backend"))
            backend.restore(module, state_dict["state"], {k: Path(v) for k, v in state_dict["artifacts"].items()},
                            torch.device(state_dict.get("device") or "cpu"), where)
            backend.activate()
        return backend

    @staticmethod
    def from_spec(spec: dict) -> "Backend":
        return BACKENDS.resolve(spec["type"], Backend)._from_spec(spec)

    @classmethod
    def _from_spec(cls, spec: dict) -> "Backend":
        """Recreate from spec(); a backend whose spec() holds more than its config overrides both."""
        data = dict(spec.get("config") or {})
        return cls(cls.config_class.from_dict(data) if data else None)

    # ----- planning before the build (a hook for executors) ----------------------------
    @classmethod
    def plan_key(cls, spec: dict) -> str | None:
        """A backend whose build needs a plan made first (KernelSelectorBackend's kernel plan) returns a key
        here: jobs with one key share one plan, which the executor makes on the driver with its own runner
        (planner) and hands to each build in its spec (spec_with_plan). None (the default): no plan."""
        return None

    @classmethod
    def planner(cls, spec: dict, runner: Any) -> "Planner":
        """The Planner that makes spec's plan, its tasks run by runner (a kernel_forge.runner.ForgeRunner)."""
        raise NotImplementedError(f"{cls.__name__} makes no plan before its build")

    @classmethod
    def with_rule(cls, spec: dict, rule: Any) -> dict:
        """spec, carrying the strategy's accept rule (a decision.rule.Rule) for the choices the backend makes
        itself (a KernelSelectorBackend's kernel plan). The default: spec unchanged."""
        return spec

    @classmethod
    def spec_with_plan(cls, spec: dict, plan: Any) -> dict:
        """spec, carrying the finished plan: a build from it uses the plan and does not make one."""
        raise NotImplementedError(f"{cls.__name__} makes no plan before its build")

    def check_kernel_plan(self, plan: Any) -> None:
        """Called by KernelSelectorBackend before this backend, as its delegate, builds or restores the module
        with plan (a KernelOptimizationPlan) applied: raise to refuse a plan it cannot build; a backend may
        also adapt how it builds. The default accepts every plan."""

    # ----- lifecycle ------------------------------------------------------------------
    def build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> "Backend":
        """Build for module on device, using the recorded samples. Leaves the backend ACTIVE."""
        if self.state != BackendState.INIT:
            raise BuildError(f"{self.name} was already built; create a new backend to build again")
        self.device = torch.device(device)
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        logger.info("building %s on %s", self.describe(), self.device)
        with as_it_was(module):
            self._build(module, samples, self.device, workdir)
        self.state = BackendState.ACTIVE
        return self

    def activate(self) -> None:
        if self.state == BackendState.INIT:
            raise BuildError(f"{self.name} must be built before it is activated")
        if self.state in (BackendState.INACTIVE, BackendState.CHECKPOINT_LOADED):
            self._activate()
            self.state = BackendState.ACTIVE

    def deactivate(self) -> None:
        if self.state == BackendState.ACTIVE:
            self._deactivate()
            self.state = BackendState.INACTIVE

    def deploy(self) -> None:
        """Final state after a checkpoint load: ready for inference, no longer switchable."""
        self.activate()
        self.state = BackendState.DEPLOYED

    def infer(self, *args: Any, **kwargs: Any) -> Any:
        if self.state not in (BackendState.ACTIVE, BackendState.DEPLOYED):
            raise BuildError(f"{self.name} is {self.state.value}; it must be built and active for inference")
        if not torch.is_grad_enabled():   # a serving loop's no_grad or inference_mode: entering it again costs
            return self._infer(*args, **kwargs)   # more than this whole check (docs/measurement.md)
        with torch.no_grad():
            return self._infer(*args, **kwargs)

    __call__ = infer

    # ----- checkpoint -------------------------------------------------------------------
    def export(self) -> tuple[dict, dict[str, Path]]:
        """(JSON state, {artifact name: file}) for a checkpoint. JIT backends store no artifact."""
        return self._state(), ({} if self.is_jit else self._artifacts())

    def restore(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device: torch.device,
                workdir: Path) -> "Backend":
        """Make this backend ready from a checkpoint: JIT rebuilds from its recipe, AOT loads its artifact."""
        self.device = torch.device(device)
        Path(workdir).mkdir(parents=True, exist_ok=True)
        with as_it_was(module):
            if self.is_jit:
                self._build(module, SampleStore(), self.device, Path(workdir))
            else:
                self._load(module, state, artifacts, self.device)
        self.state = BackendState.CHECKPOINT_LOADED
        return self

    # ----- for subclasses ---------------------------------------------------------------
    @abstractmethod
    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        """Build the backend. At checkpoint load of a JIT backend, samples is empty."""

    @abstractmethod
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Run the built module."""

    def _activate(self) -> None:
        pass

    def _deactivate(self) -> None:
        pass

    def _state(self) -> dict:
        """Extra JSON state for the checkpoint manifest."""
        return {}

    def _artifacts(self) -> dict[str, Path]:
        raise NotImplementedError(f"{self.name} is ahead-of-time and must implement _artifacts()")

    def _load(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device: torch.device) -> None:
        raise NotImplementedError(f"{self.name} is ahead-of-time and must implement _load()")


class Planner(ABC):
    """Makes one plan before the builds that share it: profile() first (it runs the module on the calling
    thread, under a profiler: one at a time in a process), then search() on any thread; cancel() stops a
    search in progress."""

    @abstractmethod
    def profile(self, module: nn.Module, samples: SampleStore) -> None:
        ...

    @abstractmethod
    def search(self) -> Any:
        """The plan (what spec_with_plan takes); it has describe() for the log."""

    def cancel(self) -> None:
        pass


def plan_key_of(spec: dict) -> str | None:
    """Backend.plan_key of the class a spec names (None when it names none that can be imported)."""
    try:
        cls = BACKENDS.resolve(str(spec.get("type", "")), Backend)
    except ConfigError:
        return None
    return cls.plan_key(spec)


def backend_class_of(spec: dict) -> type["Backend"]:
    return BACKENDS.resolve(str(spec.get("type", "")), Backend)


def config_defaults(spec: dict) -> dict:
    """The to_dict() of the default config of spec's backend class when that class is registered, else {}
    (nothing is imported: a report may describe a checkpoint's specs)."""
    cls = BACKENDS.registered(str(spec.get("type", "")))
    try:
        return cls.default_config().to_dict() if cls is not None else {}
    except Exception:   # a config class without defaults for every field
        return {}
