"""Module: wraps an nn.Module, records its real inputs, tunes it and then calls the chosen backend."""

from __future__ import annotations

import contextlib
import inspect as pyinspect
import logging
from typing import Any, Iterator

import torch
from torch import nn

from aitune_ray.backend.backend import Backend
from aitune_ray.records.registry import set_user_wrapper
from aitune_ray.model.dynamic_shapes import check_dynamic_shapes
from aitune_ray.errors import AITuneRayError, ConfigError, ModuleStateError, RecordingError
from aitune_ray.model.recording import ModuleState, note_call, recording_session  # noqa: F401 (re-exported)
from aitune_ray.model.samples import Sample, SampleStore, batch_size_of, check_recordable, detach_clone

logger = logging.getLogger(__name__)

#: What the wrapper itself holds: set on it even where the wrapped module has an attribute of that name.
OWN_ATTRIBUTES = frozenset({"module", "name", "strategy", "max_samples", "samples", "state", "backend", "report",
                            "failure", "_workdir", "_proxy", "_original_forward"})


class ProxyForward:
    """The wrapped module's own forward while it is wrapped, as AITune's proxy: code that keeps calling the
    original object runs its hooks and then this, which hands the call to the wrapper (recorded, tuned
    backend or eager). inspect.signature() reads the original forward's signature."""

    __slots__ = ("wrapper",)

    def __init__(self, wrapper: "Module"):
        self.wrapper = wrapper

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.wrapper._dispatch(args, kwargs)   # noqa: SLF001 - the wrapper's own call path

    @property
    def __signature__(self) -> pyinspect.Signature:
        return pyinspect.signature(self.wrapper._plain_forward())   # noqa: SLF001


def wrapper_of(module: Any) -> "Module | None":
    """The aitune_ray.Module whose proxy stands in module's forward, else None."""
    proxy = getattr(module, "__dict__", {}).get("forward")
    return proxy.wrapper if isinstance(proxy, ProxyForward) else None


class Module(nn.Module):
    """AITune's Module: wrap, record, tune, call. It stands in for the module it wraps: isinstance() sees
    the wrapped class, its attributes (read and set) and indexing reach the wrapped module, and state_dict() keys are
    the wrapped module's own (no prefix), so a model's state_dict reads the same wrapped or not.

    As in AITune, the wrapped module's own forward is replaced by a proxy (ProxyForward), so calling the
    original object records, runs the tuned backend or runs eagerly exactly as calling the wrapper does; its
    forward hooks run around that, once per call, and are removed while a backend builds or runs.

    module: the nn.Module to tune. name: used in reports and checkpoints (default: AITune's, the class as
        "package.module.Qualname"; "/" in a given name becomes "_", as AITune's).
    strategy: a TuneStrategy (default: MaxThroughput over the backends usable on this machine).
    strategies: AITune's per-graph list; a module here is one graph, so a list of one strategy only.
    dynamic_shapes: refused (the shapes a backend accepts are the recorded ones; record calls at a
        dimension's smallest and largest sizes instead).
    max_samples: the most calls recorded (later calls still run, and are counted).
    """

    def __init__(self, module: nn.Module, name: str | None = None, strategy=None, strategies=None,
                 dynamic_shapes=None, max_samples: int = 64, *, patch_forward: bool = True):
        if not isinstance(module, nn.Module):
            raise ConfigError(f"Module wraps a torch.nn.Module, not {type(module).__name__}")
        if isinstance(module, Module):
            raise ConfigError("this module is already wrapped by aitune_ray.Module")
        previous = wrapper_of(module)   # wrapped before: this wrapper takes its calls over
        strategy = _one_strategy(strategy, strategies)
        if dynamic_shapes is not None:
            check_dynamic_shapes(dynamic_shapes)
            raise ConfigError("dynamic_shapes is not supported: backends here accept the shapes that were "
                              "recorded, so record calls at each dynamic dimension's min and max size (tune() "
                              "with batch_sizes=[min, ..., max] for the batch dimension; TensorRTProfile for "
                              "TensorRT's optimization profiles) and leave dynamic_shapes out")
        super().__init__()
        self.module = module
        self.name = name.replace("/", "_") if name else qualified_name(module)   # as AITune names it
        self.strategy = strategy
        self.max_samples = max_samples
        self.samples = SampleStore()
        self.state = ModuleState.RECORDING
        self.backend: Backend | None = None
        self.report = None
        self.gpu_kind = ""   # the GPU kind it was tuned for on a cluster of several (RayExecutor gpu_kind)
        self.failure: str = ""
        self.register_state_dict_post_hook(_unprefixed_keys)
        self.register_load_state_dict_pre_hook(_prefixed_keys)
        # an instance's own forward, if it had one (the earlier wrapper's record of it, when wrapped before)
        self._original_forward = previous._original_forward if previous is not None else module.__dict__.get("forward")
        self._proxy = ProxyForward(self)
        if patch_forward:
            self.patch_forward()
            if previous is not None:
                logger.warning("%s was already wrapped by aitune_ray.Module %r: calls to it now reach the new "
                               "wrapper %r (the earlier one keeps its samples and backend)", type(module).__name__,
                               previous.name, self.name)

    @property
    def __class__(self):   # isinstance(wrapped, nn.Linear) as for the module it stands in for
        return type(self.module)

    def _get_name(self) -> str:
        return "Module"

    def __reduce_ex__(self, protocol):   # pickle checks __class__, which names the wrapped class
        return _blank_module, (), self.__getstate__()

    def __getitem__(self, key: Any) -> Any:
        return self.module[key]

    def __setattr__(self, name: str, value: Any) -> None:
        """An attribute the wrapped module has, and the wrapper does not, is set on the wrapped module."""
        inner = self.__dict__.get("_modules", {}).get("module")
        if (inner is not None and name not in OWN_ATTRIBUTES and name not in self.__dict__
                and not hasattr(type(self), name) and hasattr(inner, name)):
            setattr(inner, name, value)
            return
        super().__setattr__(name, value)

    # ----- calls ----------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        inner = self.module
        if inner.__dict__.get("forward") is self._proxy:
            return inner(*args, **kwargs)   # the wrapped module's hooks, then its forward: the proxy
        return self._dispatch(args, kwargs)

    def _dispatch(self, args: tuple, kwargs: dict) -> Any:
        """One call: recorded, the backend's, or eager; the wrapped module's own forward back in place and its
        hooks removed meanwhile (they ran around this call), so a backend calling it runs neither twice."""
        note_call(self)
        inner = self.module
        saved = self._make_plain(inner)
        try:
            if self.state == ModuleState.RECORDING:
                return self._record(args, kwargs)
            if self.backend is not None:
                return self.backend.infer(*args, **kwargs)
            return inner(*args, **kwargs)   # eager: not tuned, failed, or kept eager by the decision
        finally:
            _put_back(inner, saved)

    def _plain_forward(self):
        return self._original_forward or type(self.module).forward.__get__(self.module)

    def _make_plain(self, inner: nn.Module) -> tuple:
        """Take the proxy and the forward hooks off inner (the hook dicts stay the same objects, so every
        handle keeps working); returns what _put_back puts back."""
        own = inner.__dict__
        pre, post = own["_forward_pre_hooks"], own["_forward_hooks"]
        saved = (own.get("forward"), dict(pre), dict(post))
        pre.clear()
        post.clear()
        _put_forward(own, self._original_forward)
        return saved

    def patch_forward(self) -> None:
        """Put the proxy in the wrapped module's forward (Module() does, unless patch_forward=False)."""
        self.module.__dict__["forward"] = self._proxy

    @contextlib.contextmanager
    def unpatched(self) -> Iterator[nn.Module]:
        """The wrapped module as it was (its own forward, no hooks) while a backend builds, is restored or
        timed beside eager; hooks a backend adds meanwhile are kept, run before the user's (as AITune)."""
        saved = self._make_plain(self.module)
        try:
            yield self.module
        finally:
            _put_back(self.module, saved)

    def eager_call(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped module run eagerly as the user calls it (its hooks around its own forward), untouched by
        the wrapper's state: the baseline the deployed module is timed against."""
        inner = self.module
        saved = inner.__dict__.get("forward")
        _put_forward(inner.__dict__, self._original_forward)
        try:
            return inner(*args, **kwargs)
        finally:
            _put_forward(inner.__dict__, saved)

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
    def tune(self, device=None, strategy=None, dry_run: bool = False, executor=None):
        """Tune on the recorded samples. Returns a ModuleReport (None for a dry run).

        strategy: used for this call instead of the module's own. dry_run: log what would be tuned, build
        nothing. A module that fails to tune stays eager; the failure is logged and kept in self.failure.
        The strategy's own errors (OneBackendStrategy's failed build or check) are raised after that.
        """
        from aitune_ray.api.tuning import tune_modules

        own = self.strategy
        if strategy is not None:
            self.strategy = strategy
        try:
            if dry_run:
                from aitune_ray.api.tuning import _dry_run

                _dry_run([self], device)
                return None
            from aitune_ray.model.max_batch import find_max_batch_sizes
            from aitune_ray.api.tuning import _devices_are_local

            find_max_batch_sizes([self], device, local=_devices_are_local(executor))
            report = tune_modules([self], device=device, executor=executor, raise_errors=True)
        finally:
            self.strategy = own
        return report.modules[0] if report.modules else None

    # ----- AITune's properties -----------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """As AITune's: the tuned backend's device once tuned, else the wrapped module's."""
        from aitune_ray.runtime.device import module_device

        if self.backend is not None and self.backend.device is not None:
            return torch.device(self.backend.device)
        return module_device(self.module)

    @property
    def cache_dir(self):
        raise ConfigError(f"{self.name}: Module.cache_dir does not exist here: nothing is cached between runs "
                          "(each run's builds live in a work folder removed after it); to keep a run's results "
                          "and resume it, pass tune(..., run_dir=FOLDER)")

    @property
    def graph_specs(self):
        raise ConfigError(f"{self.name}: Module.graph_specs does not exist here: a module is tuned as one graph on "
                          "every recorded shape; module.samples.batch_sizes() and module.samples.signature() "
                          "describe what was recorded")

    # ----- AITune's state methods --------------------------------------------------------------
    def activate(self) -> None:
        """A tuned module's backend takes calls again (after deactivate()); a module kept eager stays so."""
        if self.state == ModuleState.RECORDING:
            raise ModuleStateError(f"{self.name} is not tuned: there is no backend to activate")
        if self.state == ModuleState.TUNED and self.backend is not None:
            self.backend.activate()

    def deactivate(self) -> None:
        """Release a tuned module's backend (its memory, its replacements); activate() brings it back.
        Calls in between fail with the backend's error."""
        if self.state == ModuleState.TUNED and self.backend is not None:
            self.backend.deactivate()

    def enable_passthrough(self, force: bool = False) -> None:
        """Calls run the wrapped module eagerly, unrecorded. A tuned module needs force=True (its backend
        is dropped)."""
        self._leave_tuned(force, "enable_passthrough")
        self.use_backend(None)

    def enable_recording(self, force: bool = False) -> None:
        """Calls are recorded again (samples already recorded are kept). A tuned module needs force=True."""
        self._leave_tuned(force, "enable_recording")
        self.record()

    def _leave_tuned(self, force: bool, method: str) -> None:
        if self.state == ModuleState.TUNED and not force:
            raise ModuleStateError(f"{self.name} is tuned: {method}(force=True) drops its backend")

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

    def keep_eager(self) -> None:
        """The decision kept eager (no candidate that built and passed was faster): TUNED, as in AITune, whose
        strategy returns the eager baseline as the backend. Calls run eagerly; the report says why."""
        self.use_backend(None)
        self.state = ModuleState.TUNED
        self.failure = ""

    def stay_eager(self, reason: str) -> None:
        """Tuning failed (or was stopped): EAGER, with the reason kept in self.failure."""
        self.use_backend(None)
        self.failure = reason

    def extra_repr(self) -> str:
        chosen = self.backend.describe() if self.backend else "eager"   # also TUNED with eager kept
        return f"name={self.name!r}, state={self.state.value}, backend={chosen}"


def qualified_name(module: nn.Module) -> str:
    """AITune's default name: the module's class as "package.module.Qualname"."""
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


def _put_forward(own: dict, forward) -> None:
    """A module's own forward attribute set to forward (None: none of its own, so its class's forward)."""
    if forward is None:
        own.pop("forward", None)
    else:
        own["forward"] = forward


def _put_back(inner: nn.Module, saved: tuple) -> None:
    """Forward and hooks back as _make_plain took them; hooks registered meanwhile (by a backend) stay, first."""
    own = inner.__dict__
    _put_forward(own, saved[0])
    for hooks, before in ((own["_forward_pre_hooks"], saved[1]), (own["_forward_hooks"], saved[2])):
        hooks.update(before)


def _one_strategy(strategy, strategies):
    """strategy, or the one strategy of AITune's strategies= list (a module here is one graph)."""
    if strategies is None:
        return strategy
    if strategy is not None:
        raise ConfigError("give strategy= or strategies=, not both")
    if not isinstance(strategies, list) or len(strategies) != 1:
        raise ConfigError("strategies= takes a list of one strategy here (a module is tuned as one graph, on "
                          "every recorded shape): pass strategy=... instead")
    return strategies[0]


def _blank_module() -> Module:
    return Module.__new__(Module)


PREFIX = "module."


def _unprefixed_keys(module, state_dict, prefix, local_metadata) -> None:
    """state_dict keys of the wrapped module without the wrapper's own attribute name."""
    inner = prefix + PREFIX
    for key in [k for k in state_dict if k.startswith(inner)]:
        state_dict[prefix + key[len(inner):]] = state_dict.pop(key)


def _prefixed_keys(module, state_dict, prefix, *args) -> None:
    """Keys as state_dict() writes them (unprefixed) read into the wrapped module; prefixed keys as well."""
    inner = prefix + PREFIX
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(inner)]:
        state_dict[inner + key[len(prefix):]] = state_dict.pop(key)


def find_modules(obj: Any) -> dict[str, Module]:
    """Wrapped Modules reachable from obj by attribute path ("" for obj itself)."""
    if isinstance(obj, Module):
        return {"": obj}
    found: dict[str, Module] = {}
    if isinstance(obj, nn.Module) and wrapper_of(obj) is not None:
        return {"": wrapper_of(obj)}   # the original object of a wrapper: it is tuned, saved and loaded as one
    if isinstance(obj, nn.Module):
        for path, sub in obj.named_modules():
            wrapper = sub if isinstance(sub, Module) else wrapper_of(sub)
            if (wrapper is not None and not any(path.startswith(p + ".") for p in found if p)
                    and all(wrapper is not w for w in found.values())):
                found[path] = wrapper
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


set_user_wrapper(Module)   # the call path the worker core times candidates behind (aitune_ray.records.registry)
