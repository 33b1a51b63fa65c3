"""Which modules of a profiled object get a region of their own, and the spans that mark them in the profile.

Two kinds of region, as in AITune's profile:
- tuned ("aot_managed_module"): every aitune_ray.Module reachable from the object by attribute path (the
  finder tune(), save() and load() use: aitune_ray.api.module.find_modules), named by the wrapper's name;
- untuned ("untuned_module"): the outermost plain modules beside them. The search starts at the object's
  children (an nn.Module) or at its attributes that are modules (any other object); a module that is a
  wrapper, or lies inside one, is skipped; a ModuleList or ModuleDict (never called itself), or a module that
  holds a wrapper somewhere below, is looked into; any other module is one region, named by its path. A
  module reached by two paths is one region, at the first.

During the runs each region's calls are wrapped in torch.profiler.record_function spans named by a stable
label (LABELS), so the Chrome trace and the profiler's events show them. The span opens at the first entry
into a module (its forward, or one of its own public methods on an untuned region, such as vae.decode) and
closes when that entry returns: a method that calls forward on the same module opens no second span.
Everything is put back on exit, also when a call fails.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from typing import Any

import torch
from torch import nn

from aitune_ray.api.module import Module, find_modules_or_none
from aitune_ray.errors import AITuneRayError

logger = logging.getLogger(__name__)

TUNED = "aot_managed_module"
UNTUNED = "untuned_module"
#: The span around one measured run, and each region's span prefix: AITune's labels, so that a trace reads
#: the same whichever tool wrote it.
RUN_LABEL = "aitune.performance.profiled_run"
LABELS = {TUNED: "aitune.performance.aot_module:", UNTUNED: "aitune.performance.untuned_module:"}
#: Region ids in the report: AITune's prefixes.
ID_PREFIXES = {TUNED: "aot_module:", UNTUNED: "untuned_module:"}


@dataclasses.dataclass(frozen=True, eq=False)
class Region:
    """One module that gets its own span: kind (TUNED or UNTUNED), name (a wrapper's name, a module's path)."""

    kind: str
    name: str
    module: nn.Module
    module_type: str

    @property
    def label(self) -> str:
        return LABELS[self.kind] + self.name

    def state(self) -> str | None:
        """A wrapper's state (ModuleState's value); None for an untuned module."""
        return self.module.state.value if self.kind == TUNED else None


def type_name(value: Any) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def region_id(kind: str, name: str) -> str:
    return ID_PREFIXES[kind] + name


def find_regions(obj: Any) -> list[Region]:
    """The tuned regions (wrappers reachable from obj), then the untuned ones beside them."""
    wrappers = list(find_modules_or_none(obj).values())
    taken: dict[str, int] = {}
    tuned = []
    for wrapper in wrappers:
        count = taken.get(wrapper.name, 0)
        taken[wrapper.name] = count + 1
        name = f"{wrapper.name}_{count}" if count else wrapper.name
        tuned.append(Region(TUNED, name, wrapper, type_name(wrapper.module)))
    managed = {id(m) for wrapper in wrappers for m in wrapper.modules()}
    untuned, seen = [], set()
    for path, module in _starting_points(obj):
        for region in _untuned_in(module, path, managed):
            if id(region.module) not in seen:
                seen.add(id(region.module))
                untuned.append(region)
    return tuned + untuned


def _starting_points(obj: Any) -> list[tuple[str, nn.Module]]:
    if isinstance(obj, nn.Module):
        return list(obj.named_children())
    try:
        members = vars(obj)
    except TypeError:   # no __dict__ (a function's closure is not searched)
        return []
    return [(name, value) for name, value in members.items() if isinstance(value, nn.Module)]


def _untuned_in(module: nn.Module, path: str, managed: set[int]) -> list[Region]:
    if id(module) in managed:
        return []
    container = isinstance(module, (nn.ModuleList, nn.ModuleDict))
    holds_wrapper = any(id(m) in managed for m in module.modules() if m is not module)
    if not container and not holds_wrapper:
        return [Region(UNTUNED, path, module, type_name(module))]
    return [region for name, child in module.named_children()
            for region in _untuned_in(child, f"{path}.{name}", managed)]


def own_methods(module: nn.Module) -> list[str]:
    """The public methods its class (or a mixin) adds to nn.Module's, forward excepted: vae.decode, generate."""
    base = set(dir(nn.Module))
    cls = type(module)
    names = []
    for name in dir(cls):
        if name.startswith("_") or name in base:
            continue
        try:
            found = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        if inspect.isfunction(found):
            names.append(name)
    return names


class _Open:
    """An open span on one module, and how many entries into that module are under way."""

    def __init__(self, span: Any):
        self.span, self.depth = span, 1


class RegionSpans:
    """Context manager: a record_function span around every region's calls while it is open (see above)."""

    def __init__(self, regions: list[Region]):
        self.regions = regions
        #: every span label in use -> its region (an untuned region's methods are regions of their own name)
        self.labels: dict[str, Region] = {region.label: region for region in regions}
        self._open: dict[int, _Open] = {}
        self._handles: list[Any] = []
        self._methods: list[tuple[nn.Module, str, Any, bool]] = []   # module, name, original, was own attribute

    def __enter__(self) -> "RegionSpans":
        try:
            for region in self.regions:
                self._handles.append(region.module.register_forward_pre_hook(self._pre_hook(region.label)))
                self._handles.append(region.module.register_forward_hook(self._post_hook, always_call=True))
                if region.kind == UNTUNED:
                    self._wrap_methods(region)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        problems = []
        for module, name, original, own in reversed(self._methods):
            try:
                if own:
                    module.__dict__[name] = original
                else:
                    module.__dict__.pop(name, None)
            except Exception as error:   # pragma: no cover - a module that refuses its own __dict__
                problems.append(error)
        self._methods.clear()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for entry in self._open.values():   # spans a failed call left open
            try:
                entry.span.__exit__(None, None, None)
            except Exception as error:   # pragma: no cover - a profiler already torn down
                problems.append(error)
        self._open.clear()
        if problems:
            raise AITuneRayError(f"profile: the region spans could not all be removed: {problems!r}")

    # ----- entering and leaving a module ---------------------------------------------------------
    def _enter(self, module: nn.Module, label: str) -> None:
        entry = self._open.get(id(module))
        if entry is not None:
            entry.depth += 1
            return
        span = torch.profiler.record_function(label)
        span.__enter__()
        self._open[id(module)] = _Open(span)

    def _leave(self, module: nn.Module) -> None:
        entry = self._open.get(id(module))
        if entry is None:
            return
        entry.depth -= 1
        if entry.depth == 0:
            del self._open[id(module)]
            entry.span.__exit__(None, None, None)

    def _pre_hook(self, label: str):
        def pre_hook(module: nn.Module, args: tuple) -> None:
            self._enter(module, label)

        return pre_hook

    def _post_hook(self, module: nn.Module, args: tuple, output: Any) -> None:
        self._leave(module)

    def _wrap_methods(self, region: Region) -> None:
        module = region.module
        for name in own_methods(module):
            own = name in module.__dict__
            original = getattr(module, name)
            if not callable(original):   # shadowed on the instance by a value: left alone
                continue
            method_region = dataclasses.replace(region, name=f"{region.name}.{name}")
            self.labels[method_region.label] = method_region
            module.__dict__[name] = self._spanned(module, method_region.label, original)
            self._methods.append((module, name, original, own))

    def _spanned(self, module: nn.Module, label: str, original: Any):
        @functools.wraps(original)
        def spanned(*args: Any, **kwargs: Any) -> Any:
            self._enter(module, label)
            try:
                return original(*args, **kwargs)
            finally:
                self._leave(module)

        return spanned
