"""Job files for the aitune-ray command: the schema, its checks, and turning a job into objects.

The generic validator is aitune_ray/records/validate.py; wrapping the named submodules is aitune_ray/model/wrapping.py.

A job file is YAML (or JSON). Every key is checked before any work starts; a problem is a ConfigError
whose message starts with the key path, e.g. ``strategy.min_speedup_ratio: expected a number, got str``.
Paths in the file are relative to the current working directory.

A job of several models lists them under ``models``, each entry with the keys of a one-model job but
executor and device, which all models share (they run as one schedule): load_jobs() gives one Job per model,
every entry checked before any is returned (errors name ``models[N].key``).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Callable

from aitune_ray.records import imports
from aitune_ray.records.artifacts import plain_part
from aitune_ray.decision.session import CONFIRM_ROUNDS
from aitune_ray.command.job_text import MAX_JOB_BYTES, read_job_text  # noqa: F401 - MAX_JOB_BYTES: named here too
from aitune_ray.errors import ConfigError
from aitune_ray.records.validate import bounded, from_data, kind_of
from aitune_ray.model import wrapping

__all__ = ["Job", "ModuleSpec", "StrategySpec", "BackendSpec", "ExecutorSpec", "load_job", "load_jobs", "parse_job",
           "parse_jobs", "wrap_modules", "move_to"]

STRATEGIES = {
    "MaxThroughput": "MaxThroughputStrategy",
    "MinLatency": "MinLatencyStrategy",
    "LatencyBudget": "LatencyBudgetStrategy",
    "FirstWins": "FirstWinsStrategy",
    "OneBackend": "OneBackendStrategy",
}
EXECUTORS = ("auto", "ray", "inline")   # auto: aitune_ray/executors/choice.py
DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)\Z")   # \Z: "$" lets a final newline pass


def _called(factory: Callable, kwargs: dict, what: str) -> Any:
    """factory(**kwargs); what the user's factory raised becomes a ConfigError naming it, in one line."""
    try:
        return factory(**kwargs)
    except (KeyboardInterrupt, SystemExit, ConfigError):
        raise
    except BaseException as exc:  # noqa: BLE001 - the user's code: whatever it raised is this job's error
        text = " ".join(str(exc).split())
        raise ConfigError(f"{what} raised {type(exc).__name__}" + (f": {text[:400]}" if text else "")) from exc


# ----- the schema ---------------------------------------------------------------------------------
@dataclasses.dataclass
class ModuleSpec:
    """One submodule to wrap: its attribute path ("" for the whole model) and its name in reports."""

    path: str = ""
    name: str | None = None
    max_samples: int = bounded(64, 1, 1_000_000)


@dataclasses.dataclass
class StrategySpec:
    type: str = "MaxThroughput"
    performance_validation: bool = True
    min_speedup_ratio: float = bounded(0.01, 0, 100)
    noise_tolerance: float = bounded(0.03, 0, 1)
    tolerance: float | dict[str, float] | None = None
    max_finalists: int = bounded(3, 1, 1000)                 # confirmed in one session at most
    dispatch_by_batch_size: bool = False    # MaxThroughput only
    latency_budget_ms: float | None = None   # LatencyBudget only, and required there: the most a call may take (ms)
    deploy_check_rounds: int = bounded(20, 0, 10_000)
    measure: dict[str, Any] = dataclasses.field(default_factory=dict)   # MeasureConfig fields


@dataclasses.dataclass
class BackendSpec:
    type: str                                # a name from aitune_ray.backend, or "pkg.module:Class"
    config: dict[str, Any] = dataclasses.field(default_factory=dict)    # its BackendConfig fields


@dataclasses.dataclass
class ExecutorSpec:
    """type: "auto", "ray" or "inline"; the other keys are RayExecutor options (inline: task_timeout_s,
    remeasure_rounds, contain)."""

    type: str = "auto"                       # auto: Ray with GPUs here or a cluster address, else inline
    address: str | None = None
    gpus_per_actor: float | None = bounded(None, 0, 1024)
    cpus_per_actor: float = bounded(1, 0, 4096)
    max_actors: int | None = bounded(None, 1, 100_000)
    task_timeout_s: float = bounded(1800.0, 0.001, 30 * 86400)
    max_actor_restarts: int = bounded(3, 0, 10_000)
    artifact_dir: str | None = None
    inline_artifact_limit_mb: int = bounded(256, 0, 1 << 20)
    log_dir: str | None = None
    remeasure_rounds: int = bounded(CONFIRM_ROUNDS, 1, 100_000)   # paired rounds per batch size of the confirm session
    warm_up: str = "compile"                 # what each GPU actor does as it starts: compile, imports or off
    contain: bool = True                     # inline only: each build in a child process (false: in this one)
    gpu_kind: str | None = None              # tune for this GPU kind only (e.g. H100, or a custom resource label)
    gpu_kinds: list[str] | None = None       # decide for each of these kinds: the job runs once per kind

    def ray_options(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("type", "address", "contain", "gpu_kinds")}


@dataclasses.dataclass
class Job:
    model: str | None = None                 # "package.module:factory" (required unless models is given)
    data: str | None = None                  # "package.module:factory" returning an iterable dataset (likewise)
    model_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    data_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    modules: list[ModuleSpec | str] = dataclasses.field(default_factory=lambda: [ModuleSpec()])
    strategy: StrategySpec = dataclasses.field(default_factory=StrategySpec)
    backends: list[BackendSpec] | None = None    # None: the library's default backends for the device
    device: str = "auto"
    serving_threads: int | None = bounded(None, 1, 4096)   # torch threads the model is served with; every figure of the answer is measured with it, on every executor (None: the command's own torch.get_num_threads())
    executor: ExecutorSpec = dataclasses.field(default_factory=ExecutorSpec)
    output: str | None = None                # checkpoint path; default: <job file stem>.ait
    report: str | None = None                # Markdown report path (.html, .json, PNGs beside it); default: beside output
    name: str | None = None                  # the model's name in a job of several (default: model<N>)
    models: list[dict[str, Any]] | None = None   # several models, one schedule: each entry takes the keys above
    # but executor and device, which they share; output defaults to <job file stem>.<name>.ait

    # ----- objects the job names --------------------------------------------------------------------
    def model_factory(self) -> Callable:
        return import_object(self.model, "model")

    def data_factory(self) -> Callable:
        return import_object(self.data, "data")

    def make_model(self) -> Any:
        return _called(self.model_factory(), self.model_args, f"model: {self.model}")

    def make_data(self) -> Any:
        return _called(self.data_factory(), self.data_args, f"data: {self.data}")

    def module_specs(self) -> list[ModuleSpec]:
        return [m for m in self.modules if isinstance(m, ModuleSpec)]

    def make_backends(self) -> list | None:
        if self.backends is None:
            return None
        backends = []
        for index, spec in enumerate(self.backends):
            where = f"backends[{index}]"
            cls = backend_class(spec.type, f"{where}.type")
            config = (make_config(cls.config_class, spec.config, f"{where}.config") if spec.config
                      else cls.default_config())   # no config: the backend's own default, as Backend() has
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
            from aitune_ray.runtime.device import resolve_device
            from aitune_ray.api.tuning import default_strategy

            backends = default_strategy(resolve_device(device)).backends
        cls = getattr(aitune_ray, STRATEGIES[spec.type])
        options = dict(tolerance=spec.tolerance, min_speedup_ratio=spec.min_speedup_ratio,
                       noise_tolerance=spec.noise_tolerance, deploy_check_rounds=spec.deploy_check_rounds,
                       max_finalists=spec.max_finalists,
                       measure_config=make_config(MeasureConfig, spec.measure, "strategy.measure"))
        try:
            if spec.type == "OneBackend":
                if len(backends) != 1:
                    raise ConfigError(f"backends: OneBackend takes exactly one backend, got {len(backends)}")
                strategy = cls(backends[0], **options)
            elif spec.type == "MaxThroughput":
                strategy = cls(backends, dispatch_by_batch_size=spec.dispatch_by_batch_size, **options)
            elif spec.type == "LatencyBudget":
                strategy = cls(spec.latency_budget_ms, backends, **options)
            else:
                strategy = cls(backends, **options)
        except ConfigError as exc:
            if str(exc).startswith("backends"):
                raise
            raise ConfigError(f"backends: {exc}") from exc
        return strategy.enable_performance_validation(spec.performance_validation)


# ----- loading and validation ------------------------------------------------------------------------
def load_job(path: str | Path) -> Job:
    """Read and check a job file of one model. Raises ConfigError naming the key path of the first problem."""
    jobs = load_jobs(path)
    if len(jobs) != 1:
        raise ConfigError(f"models: {path} holds {len(jobs)} models; load_jobs() reads them")
    return jobs[0]


def load_jobs(path: str | Path) -> list[Job]:
    """Read and check a job file: one Job per model (a one-model file gives one). Raises ConfigError naming
    the key path of the first problem, before anything is made or started."""
    path = Path(path)
    jobs = parse_jobs(parse_yaml(read_job_text(path), str(path)))
    several = len(jobs) > 1 or jobs[0].name is not None
    for job in jobs:
        if job.output is None:
            job.output = f"{path.stem}.{plain_part(job.name)}.ait" if several else f"{path.stem}.ait"
    kinds = jobs[0].executor.gpu_kinds
    if kinds:
        jobs = [for_kind(job, kind) for kind in kinds for job in jobs]
    _check_outputs(jobs)
    return jobs


def for_kind(job: Job, kind: str) -> Job:
    """A copy of job that decides for the GPU kind: executor.gpu_kind set, the kind in its name (a model of
    its own in the run) and in its checkpoint's and report's file names (out/bert.ait: out/bert.H100.ait)."""
    import copy

    out = copy.deepcopy(job)
    out.executor.gpu_kind, out.executor.gpu_kinds = kind, None
    out.name = f"{job.name}.{kind}" if job.name else kind
    plain = plain_part(kind)
    for key in ("output", "report"):
        value = getattr(job, key)
        if value:
            path = Path(value)
            setattr(out, key, str(path.with_name(f"{path.stem}.{plain}{path.suffix}")))
    return out


#: How many nodes a job file may hold with its aliases expanded (a real job has a few hundred).
MAX_EXPANDED_NODES = 100_000


def parse_yaml(text: str, where: str) -> Any:
    """YAML (or JSON) text as plain data. A syntax error, a key given twice, or aliases (``*name``) that expand
    to more than MAX_EXPANDED_NODES nodes (nested aliases grow exponentially: a few hundred bytes to billions
    of nodes) is a one-line ConfigError; the expanded size is counted on the composed graph, never built."""
    import yaml

    def expanded(node, sizes: dict) -> int:
        if sizes.get(id(node), 1) is None:
            raise ConfigError(f"{where}: a YAML alias (*name) inside the value it names (line "
                              f"{node.start_mark.line + 1}) never ends; write the value out")
        if id(node) not in sizes:
            sizes[id(node)] = None   # being counted: met again below it, the alias is recursive
            children = node.value if isinstance(node.value, list) else []
            flat = [c for pair in children for c in (pair if isinstance(pair, tuple) else (pair,))]
            sizes[id(node)] = min(MAX_EXPANDED_NODES + 1, 1 + sum(expanded(c, sizes) for c in flat))
        return sizes[id(node)]

    class Loader(yaml.SafeLoader):
        def compose_document(self):
            node = super().compose_document()
            if node is not None and expanded(node, {}) > MAX_EXPANDED_NODES:
                raise ConfigError(f"{where}: its YAML aliases (*name) expand to more than {MAX_EXPANDED_NODES} "
                                  "values; write the values out")
            return node

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool, type(None))):
                raise ConfigError(f"{where}: line {key_node.start_mark.line + 1}: a key must be a plain value")
            if key in seen:
                raise ConfigError(f"{key}: given twice ({where}, line {key_node.start_mark.line + 1})")
            seen.add(key)
        return loader.construct_mapping(node, deep=True)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except ConfigError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(exc.problem or exc.context or "syntax error").split())
        raise ConfigError(f"{where} is not valid YAML{at}: {problem}") from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise ConfigError(f"{where} is not valid YAML: {' '.join(str(exc).split())[:200]}") from None


#: The keys every model of a job of several shares, set once at the top of the file.
SHARED = ("executor", "device")


def parse_jobs(data: Any) -> list[Job]:
    """Check a job given as plain data: one Job per model, each carrying the shared executor and device."""
    if not isinstance(data, dict) or "models" not in data:
        return [parse_job(data)]
    own = sorted(k for k in data if k not in (*SHARED, "models"))
    if own:
        raise ConfigError(f"{own[0]}: a job with models sets it in each entry of models (only "
                          f"{' and '.join(SHARED)} are shared at the top)")
    entries = data["models"]
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"models: expected a non-empty list of models, got {kind_of(entries)}")
    shared = {k: data[k] for k in SHARED if k in data}
    jobs = []
    for index, entry in enumerate(entries):
        where = f"models[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping, got {kind_of(entry)}")
        for key in (*SHARED, "models"):
            if key in entry:
                raise ConfigError(f"{where}.{key}: set once at the top of the file, for every model")
        for key in ("model", "data"):
            if key not in entry:
                raise ConfigError(f"{where}.{key}: required key is missing")
        try:
            job = parse_job({**entry, **shared})
        except ConfigError as exc:
            raise ConfigError(f"{where}.{exc}") from exc
        job.name = job.name or f"model{index}"
        jobs.append(job)
    names = [job.name for job in jobs]
    for index, name in enumerate(names):
        if names.index(name) != index:
            raise ConfigError(f"models[{index}].name: {name!r} is used twice")
    return jobs


def _check_outputs(jobs: list[Job]) -> None:
    seen: dict[str, int] = {}
    for index, job in enumerate(jobs):
        for key in ("output", "report"):
            value = getattr(job, key)
            if value is None:
                continue
            target = str(Path(value).resolve())
            if target in seen and len(jobs) > 1:
                raise ConfigError(f"models[{index}].{key}: {value!r} is written by models[{seen[target]}] too")
            seen[target] = index


def parse_job(data: Any) -> Job:
    """Check a job of one model given as plain data (a parsed YAML mapping) and return it as a Job."""
    if not isinstance(data, dict):
        raise ConfigError(f"a job file holds a mapping of keys, got {kind_of(data)}")
    job = from_data(Job, data, "")
    if job.models is not None:
        raise ConfigError("models: a job of several models is read with parse_jobs()")
    for key in ("model", "data"):
        if getattr(job, key) is None:
            raise ConfigError(f"{key}: required key is missing (or list several models under models)")
    expand_paths(job)
    job.modules = [m if isinstance(m, ModuleSpec) else ModuleSpec(path=m) for m in job.modules]
    if not job.modules:
        job.modules = [ModuleSpec()]
    _check_job(job)
    return job


def expand_paths(job: Job) -> None:
    """A path in a job file that starts with ~ is under the user's home, as in a shell (never a folder named ~)."""
    import os

    for owner, key in ((job, "output"), (job, "report"), (job.executor, "log_dir"), (job.executor, "artifact_dir")):
        value = getattr(owner, key)
        if isinstance(value, str) and value.startswith("~"):
            setattr(owner, key, os.path.expanduser(value))


def _check_job(job: Job) -> None:
    from aitune_ray.measure.timing import MeasureConfig

    for key in ("model", "data"):
        check_arguments(import_object(getattr(job, key), key), getattr(job, f"{key}_args"), f"{key}_args")
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
    if job.strategy.type not in STRATEGIES:
        # the full class names work too
        full = {v: k for k, v in STRATEGIES.items()}
        if job.strategy.type not in full:
            raise ConfigError(f"strategy.type: unknown strategy {job.strategy.type!r}; one of {sorted(STRATEGIES)}")
        job.strategy.type = full[job.strategy.type]
    budget = job.strategy.latency_budget_ms
    if job.strategy.type == "LatencyBudget" and budget is None:
        raise ConfigError("strategy.latency_budget_ms: LatencyBudget needs a latency budget in milliseconds")
    if budget is not None and job.strategy.type != "LatencyBudget":
        raise ConfigError(f"strategy.latency_budget_ms: only LatencyBudget takes a latency budget, not "
                          f"{job.strategy.type}")
    if budget is not None and not budget > 0:
        raise ConfigError(f"strategy.latency_budget_ms: expected a positive number of milliseconds, got {budget!r}")
    from_data(MeasureConfig, job.strategy.measure, "strategy.measure")
    if job.backends is not None and not job.backends:
        raise ConfigError("backends: the list is empty (leave the key out for the default backends)")
    if not DEVICE_PATTERN.match(job.device):
        raise ConfigError(f"device: expected auto, cpu, cuda or cuda:N, got {job.device!r}")
    if job.executor.type not in EXECUTORS:
        raise ConfigError(f"executor.type: expected one of {list(EXECUTORS)}, got {job.executor.type!r}")
    from aitune_ray.runtime.warm_up import WARM_UP_MODES

    if job.executor.warm_up not in WARM_UP_MODES:
        raise ConfigError(f"executor.warm_up: expected one of {list(WARM_UP_MODES)}, got {job.executor.warm_up!r}")
    if job.executor.gpu_kind is not None and not job.executor.gpu_kind.strip():
        raise ConfigError("executor.gpu_kind: the kind is empty")
    kinds = job.executor.gpu_kinds
    if kinds is not None:
        if job.executor.gpu_kind is not None:
            raise ConfigError("executor.gpu_kinds: give gpu_kind (one kind) or gpu_kinds (several), not both")
        if not kinds:
            raise ConfigError("executor.gpu_kinds: the list is empty")
        for index, kind in enumerate(kinds):
            if not kind.strip():
                raise ConfigError(f"executor.gpu_kinds[{index}]: the kind is empty")
            if kinds.index(kind) != index:
                raise ConfigError(f"executor.gpu_kinds[{index}]: {kind!r} is listed twice")
    for key in ("output", "report"):
        if getattr(job, key) == "":
            raise ConfigError(f"{key}: the path is empty")
    # Build the strategy once now: this imports and checks every backend class and config.
    job.make_strategy(device="cpu")


def check_arguments(factory: Callable, arguments: dict, key: str) -> None:
    """The factory takes the job's arguments, so that a misspelt or missing one stops the job before it starts."""
    import inspect

    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return  # no signature to check against (a builtin): the call reports
    try:
        signature.bind(**arguments)
    except TypeError as exc:
        params = signature.parameters
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            for name in arguments:
                if name not in params:
                    raise ConfigError(f"{key}.{name}: the factory takes no argument {name!r} (it takes "
                                      f"{', '.join(params) or 'none'})") from None
        raise ConfigError(f"{key}: {exc}") from None


def check_import_path(value: str, key: str) -> None:
    module, sep, attr = value.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{key}: expected an import path 'package.module:name', got {value!r}")


def import_object(value: str, key: str) -> Any:
    """Import 'package.module:name' (name may be dotted); paths are relative to the current directory."""
    check_import_path(value, key)
    try:
        obj = imports.import_object(value, key)
    except ConfigError as exc:
        cause = exc.__cause__
        if isinstance(cause, ImportError):
            from aitune_ray.command.checks import missing_library_text

            missing = missing_library_text(cause.name) if isinstance(cause, ModuleNotFoundError) else None
            if missing:   # a library that the job's module imports, which an extra of this project brings
                raise ConfigError(f"{key}: {value.partition(':')[0]} imports {missing}") from cause
            raise ConfigError(f"{exc}; paths are relative to the current directory") from cause
        raise
    if not callable(obj):
        raise ConfigError(f"{key}: {value!r} is not callable")
    return obj


def backend_class(name: str, key: str) -> type:
    """A Backend subclass from a short name in aitune_ray.backend or an import path."""
    from aitune_ray import backend as backend_package
    from aitune_ray.backend.backend import Backend
    from aitune_ray.records.imports import import_class

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


def wrap_modules(model: Any, specs: list[ModuleSpec], strategy_factory: Callable[[], Any] | None = None):
    """Wrap the submodules named by specs in aitune_ray.Module where they live: (root, {name: Module})."""
    from aitune_ray.api.module import Module

    return wrapping.wrap_modules(model, specs, strategy_factory, Module)


def move_to(obj: Any, device) -> Any:
    """Move a model to device: an nn.Module whole, or each nn.Module attribute of a plain object."""
    from torch import nn

    if isinstance(obj, nn.Module):
        return obj.to(device)
    for value in vars(obj).values() if hasattr(obj, "__dict__") else ():
        if isinstance(value, nn.Module):
            value.to(device)
    return obj
