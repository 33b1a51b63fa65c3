"""Job files for the aitune-ray command: the schema, its validation, and turning a job into objects.

A job file is YAML (or JSON). Every key is checked before any work starts; a problem is a ConfigError
whose message starts with the key path, e.g. ``strategy.min_speedup_ratio: expected a number, got str``.
Paths in the file are relative to the current working directory.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import re
import types
import typing
from pathlib import Path
from typing import Any, Callable

from aitune_ray.errors import ConfigError

STRATEGIES = {
    "MaxThroughput": "MaxThroughputStrategy",
    "FirstWins": "FirstWinsStrategy",
    "OneBackend": "OneBackendStrategy",
}
EXECUTORS = ("ray", "inline")
DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


# ----- the schema ---------------------------------------------------------------------------------
@dataclasses.dataclass
class ModuleSpec:
    """One submodule to wrap: its attribute path ("" for the whole model) and its name in reports."""

    path: str = ""
    name: str | None = None
    max_samples: int = 64


@dataclasses.dataclass
class StrategySpec:
    type: str = "MaxThroughput"
    performance_validation: bool = True
    min_speedup_ratio: float = 0.01
    noise_tolerance: float = 0.03
    tolerance: float | dict[str, float] | None = None
    remeasure_margin: float = 0.10          # MaxThroughput only
    measure: dict[str, Any] = dataclasses.field(default_factory=dict)   # MeasureConfig fields


@dataclasses.dataclass
class BackendSpec:
    type: str                                # a name from aitune_ray.backend, or "pkg.module:Class"
    config: dict[str, Any] = dataclasses.field(default_factory=dict)    # its BackendConfig fields


@dataclasses.dataclass
class ExecutorSpec:
    """type: "ray" or "inline"; the other keys are RayExecutor options (ignored by inline)."""

    type: str = "ray"
    address: str | None = None
    gpus_per_actor: float = 1
    cpus_per_actor: float = 1
    max_actors: int | None = None
    task_timeout_s: float = 1800.0
    max_actor_restarts: int = 3
    artifact_dir: str | None = None
    inline_artifact_limit_mb: int = 256
    log_dir: str | None = None
    remeasure_rounds: int = 30

    def ray_options(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("type", "address")}


@dataclasses.dataclass
class Job:
    model: str                               # "package.module:factory"
    data: str                                # "package.module:factory" returning an iterable dataset
    model_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    data_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    modules: list[ModuleSpec | str] = dataclasses.field(default_factory=lambda: [ModuleSpec()])
    strategy: StrategySpec = dataclasses.field(default_factory=StrategySpec)
    backends: list[BackendSpec] | None = None    # None: the library's default backends for the device
    device: str = "auto"
    executor: ExecutorSpec = dataclasses.field(default_factory=ExecutorSpec)
    output: str | None = None                # checkpoint path; default: <job file stem>.ait
    report: str | None = None                # Markdown report path (.html, .json, PNGs beside it); default: beside output

    # ----- objects the job names --------------------------------------------------------------------
    def model_factory(self) -> Callable:
        return import_object(self.model, "model")

    def data_factory(self) -> Callable:
        return import_object(self.data, "data")

    def make_model(self) -> Any:
        return self.model_factory()(**self.model_args)

    def make_data(self) -> Any:
        return self.data_factory()(**self.data_args)

    def module_specs(self) -> list[ModuleSpec]:
        return [m for m in self.modules if isinstance(m, ModuleSpec)]

    def make_backends(self) -> list | None:
        if self.backends is None:
            return None
        backends = []
        for index, spec in enumerate(self.backends):
            where = f"backends[{index}]"
            cls = backend_class(spec.type, f"{where}.type")
            config = make_config(cls.config_class, spec.config, f"{where}.config")
            try:
                backends.append(cls(config))
            except (ConfigError, TypeError, ValueError) as exc:
                raise ConfigError(f"{where}: {exc}") from exc
        return backends

    def make_strategy(self, device=None):
        """A new strategy object (one per module: strategies are not shared between modules)."""
        import aitune_ray
        from aitune_ray.measure.timing import MeasureConfig

        spec = self.strategy
        backends = self.make_backends()
        if backends is None:
            from aitune_ray.device import resolve_device
            from aitune_ray.tuning import default_strategy

            backends = default_strategy(resolve_device(device)).backends
        cls = getattr(aitune_ray, STRATEGIES[spec.type])
        options = dict(tolerance=spec.tolerance, min_speedup_ratio=spec.min_speedup_ratio,
                       noise_tolerance=spec.noise_tolerance,
                       measure_config=make_config(MeasureConfig, spec.measure, "strategy.measure"))
        try:
            if spec.type == "OneBackend":
                if len(backends) != 1:
                    raise ConfigError(f"backends: OneBackend takes exactly one backend, got {len(backends)}")
                strategy = cls(backends[0], **options)
            elif spec.type == "MaxThroughput":
                strategy = cls(backends, remeasure_margin=spec.remeasure_margin, **options)
            else:
                strategy = cls(backends, **options)
        except ConfigError as exc:
            if str(exc).startswith("backends"):
                raise
            raise ConfigError(f"backends: {exc}") from exc
        return strategy.enable_performance_validation(spec.performance_validation)


# ----- loading and validation ------------------------------------------------------------------------
def load_job(path: str | Path) -> Job:
    """Read and check a job file. Raises ConfigError naming the key path of the first problem."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read job file {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    job = parse_job(data)
    if job.output is None:
        job.output = f"{path.stem}.ait"
    return job


def parse_job(data: Any) -> Job:
    """Check a job given as plain data (a parsed YAML mapping) and return it as a Job."""
    if not isinstance(data, dict):
        raise ConfigError(f"a job file holds a mapping of keys, got {_kind(data)}")
    job = from_data(Job, data, "")
    job.modules = [m if isinstance(m, ModuleSpec) else ModuleSpec(path=m) for m in job.modules]
    if not job.modules:
        job.modules = [ModuleSpec()]
    _check_job(job)
    return job


def _check_job(job: Job) -> None:
    from aitune_ray.measure.timing import MeasureConfig

    for key in ("model", "data"):
        import_object(getattr(job, key), key)
    paths = [m.path for m in job.module_specs()]
    for index, path in enumerate(paths):
        if paths.index(path) != index:
            raise ConfigError(f"modules[{index}].path: {path!r} is listed twice")
        if path == "" and len(paths) > 1:
            raise ConfigError(f"modules[{index}].path: the whole model (\"\") cannot be wrapped together with "
                              "its submodules")
    names = [m.name for m in job.module_specs() if m.name]
    for index, spec in enumerate(job.module_specs()):
        if spec.name is not None and names.count(spec.name) > 1:
            raise ConfigError(f"modules[{index}].name: {spec.name!r} is used twice")
        if spec.max_samples < 1:
            raise ConfigError(f"modules[{index}].max_samples: must be at least 1, got {spec.max_samples}")
    if job.strategy.type not in STRATEGIES:
        # the full class names work too
        full = {v: k for k, v in STRATEGIES.items()}
        if job.strategy.type not in full:
            raise ConfigError(f"strategy.type: unknown strategy {job.strategy.type!r}; one of {sorted(STRATEGIES)}")
        job.strategy.type = full[job.strategy.type]
    if job.strategy.min_speedup_ratio < 0:
        raise ConfigError("strategy.min_speedup_ratio: must be at least 0")
    from_data(MeasureConfig, job.strategy.measure, "strategy.measure")
    if job.backends is not None and not job.backends:
        raise ConfigError("backends: the list is empty (leave the key out for the default backends)")
    if not DEVICE_PATTERN.match(job.device):
        raise ConfigError(f"device: expected auto, cpu, cuda or cuda:N, got {job.device!r}")
    if job.executor.type not in EXECUTORS:
        raise ConfigError(f"executor.type: expected one of {list(EXECUTORS)}, got {job.executor.type!r}")
    for key in ("output", "report"):
        if getattr(job, key) == "":
            raise ConfigError(f"{key}: the path is empty")
    # Build the strategy once now: this imports and checks every backend class and config.
    job.make_strategy(device="cpu")


def check_import_path(value: str, key: str) -> None:
    module, sep, attr = value.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{key}: expected an import path 'package.module:name', got {value!r}")


def import_object(value: str, key: str) -> Any:
    """Import 'package.module:name' (name may be dotted)."""
    check_import_path(value, key)
    module_name, _, qualname = value.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{key}: cannot import module {module_name!r} ({exc}); paths are relative to the "
                          "current directory") from exc
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ConfigError(f"{key}: {module_name!r} has no {qualname!r}") from exc
    if not callable(obj):
        raise ConfigError(f"{key}: {value!r} is not callable")
    return obj


def backend_class(name: str, key: str) -> type:
    """A Backend subclass from a short name in aitune_ray.backend or an import path."""
    from aitune_ray import backend as backend_package
    from aitune_ray.backend.backend import Backend, import_class

    if ":" in name:
        try:
            return import_class(name, Backend)
        except ConfigError as exc:
            raise ConfigError(f"{key}: {exc}") from exc
    cls = getattr(backend_package, name, None)
    if isinstance(cls, type) and issubclass(cls, Backend) and cls is not Backend:
        return cls
    known = sorted(n for n in backend_package.__all__ if n.endswith("Backend") and n != "Backend")
    raise ConfigError(f"{key}: unknown backend {name!r}; one of {known}, or an import path 'package.module:Class'")


def make_config(cls: type, data: dict, key: str) -> Any:
    """A config dataclass (BackendConfig or MeasureConfig) from a mapping, naming the key of a bad value."""
    from_data(cls, data, key, build=False)
    try:
        if hasattr(cls, "from_dict"):
            return cls.from_dict(dict(data))
        return cls(**data)
    except (ConfigError, TypeError, ValueError) as exc:
        raise ConfigError(f"{key}: {exc}") from exc


# ----- a small validator for dataclasses with type hints -----------------------------------------------
def from_data(cls: type, data: Any, key: str, build: bool = True) -> Any:
    """Check a mapping against dataclass cls (unknown keys, missing keys, types), then build it.

    With build=False only the check is done (for classes whose own constructor converts values).
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{key or 'job'}: expected a mapping, got {_kind(data)}")
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # a user class whose annotations cannot be resolved: leave its checks to it
        hints = {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in data:
        if name not in fields:
            raise ConfigError(f"{_join(key, str(name))}: unknown key; known keys: {', '.join(fields)}")
    values = {}
    for name, field in fields.items():
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{_join(key, name)}: required key is missing")
            continue
        values[name] = check_value(data[name], hints.get(name, Any), _join(key, name))
    return cls(**values) if build else values


def check_value(value: Any, tp: Any, key: str) -> Any:
    """Check value against a type hint; return it converted (ints to floats, mappings to dataclasses)."""
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        for option in options:
            if _matches(value, option):
                return check_value(value, option, key)
        raise ConfigError(f"{key}: expected {' or '.join(_describe(o) for o in options)}, got {_kind(value)}")
    if not _matches(value, tp):
        raise ConfigError(f"{key}: expected {_describe(tp)}, got {_kind(value)}")
    if dataclasses.is_dataclass(tp):
        return from_data(tp, value, key)
    if tp is float:
        return float(value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return value
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [check_value(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        key_type, item = typing.get_args(tp) or (Any, Any)
        return {k: check_value(v, item, _join(key, str(k))) for k, v in value.items()}
    return value


def _matches(value: Any, tp: Any) -> bool:
    """Whether value is of the kind tp names (the outer kind only; check_value looks inside)."""
    if tp is Any or tp is object:
        return True
    if tp is type(None) or tp is None:
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return any(value == m.value or value == m.name or value is m for m in tp)
    origin = typing.get_origin(tp) or tp
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, o) for o in typing.get_args(tp))
    if origin is list:
        return isinstance(value, list)
    if origin is tuple:
        return isinstance(value, (list, tuple))
    if origin is dict:
        return isinstance(value, dict)
    if isinstance(origin, type):
        return isinstance(value, origin)
    return True


def _describe(tp: Any) -> str:
    if tp is type(None) or tp is None:
        return "null"
    if tp is bool:
        return "a boolean"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    origin = typing.get_origin(tp) or tp
    if origin is list or origin is tuple:
        return "a list"
    if origin is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


# ----- wrapping the modules a job names -------------------------------------------------------------
def wrap_modules(model: Any, specs: list[ModuleSpec], strategy_factory: Callable[[], Any] | None = None):
    """Wrap the submodules named by specs in aitune_ray.Module, in place where they live.

    Returns (root, modules): root is what to call (the model, or its wrapper when the whole model is
    wrapped) and modules maps each name to its Module.
    """
    from torch import nn

    from aitune_ray.module import Module

    modules: dict[str, Module] = {}
    root = model
    for index, spec in enumerate(specs):
        key = f"modules[{index}].path"
        strategy = strategy_factory() if strategy_factory else None
        if spec.path == "":
            if not isinstance(model, nn.Module):
                raise ConfigError(f"{key}: the model is a {type(model).__name__}, not a torch.nn.Module, so it "
                                  "cannot be wrapped whole; list the submodules to wrap")
            root = Module(model, name=spec.name, strategy=strategy, max_samples=spec.max_samples)
            modules[root.name] = root
            continue
        parent, attr = _parent_of(model, spec.path, key)
        target = _child(parent, attr)
        if not isinstance(target, nn.Module):
            raise ConfigError(f"{key}: {spec.path!r} is a {type(target).__name__}, not a torch.nn.Module")
        wrapped = Module(target, name=spec.name or spec.path, strategy=strategy, max_samples=spec.max_samples)
        if wrapped.name in modules:
            raise ConfigError(f"modules[{index}].name: {wrapped.name!r} is used twice")
        if isinstance(parent, list):
            parent[int(attr)] = wrapped
        else:
            setattr(parent, attr, wrapped)
        modules[wrapped.name] = wrapped
    return root, modules


def _child(obj: Any, attr: str) -> Any:
    if isinstance(obj, (list, tuple)) and attr.isdigit():
        return obj[int(attr)]
    return getattr(obj, attr)


def _parent_of(model: Any, path: str, key: str) -> tuple[Any, str]:
    parts = path.split(".")
    obj = model
    walked = []
    for depth, part in enumerate(parts):
        try:
            child = _child(obj, part)
        except (AttributeError, IndexError):
            where = ".".join(walked) or "the model"
            raise ConfigError(f"{key}: {where} ({type(obj).__name__}) has no attribute {part!r}") from None
        if depth == len(parts) - 1:
            return obj, part
        walked.append(part)
        obj = child
    raise ConfigError(f"{key}: empty path")  # not reached


def move_to(obj: Any, device) -> Any:
    """Move a model to device: an nn.Module whole, or each nn.Module attribute of a plain object."""
    from torch import nn

    if isinstance(obj, nn.Module):
        return obj.to(device)
    for value in vars(obj).values() if hasattr(obj, "__dict__") else ():
        if isinstance(value, nn.Module):
            value.to(device)
    return obj
