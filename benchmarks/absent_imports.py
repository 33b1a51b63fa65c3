"""Stand-ins for libraries that a package imports when it loads but that a run never calls.

AITune 0.6.0 imports TensorRT (its TensorRT backend subclasses `tensorrt.IOutputAllocator` at import) and
nvidia-modelopt whenever `aitune.torch` loads, also for a tuning that builds only Inductor and TorchAO
candidates. Where those libraries cannot be installed, `install(["tensorrt", "modelopt"])` lets the import
succeed: each name that no real finder can find is served by a module whose every attribute is a class that
can be subclassed, called, compared and used as a key. Calling into one does nothing, so a run that really
used TensorRT would fail or measure nothing; `used()` says which stand-ins were imported, and the benchmark
records that beside its figures.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

_served: set[str] = set()


class _StandInType(type):
    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(f"{cls.__qualname__}.{name}")


class StandIn(metaclass=_StandInType):
    """An object of a library that is not there: attributes are stand-ins, calls return the object."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(name)

    def __call__(self, *args, **kwargs):
        return self


def stand_in(name: str) -> type:
    return _StandInType(name.rpartition(".")[2] or name, (StandIn,), {"__qualname__": name})


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = stand_in(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []        # a package: its submodules are stand-ins too
        module.__version__ = "0.0.0"   # read by version checks at import
        return module

    def exec_module(self, module) -> None:
        _served.add(module.__name__)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, tops: set[str]):
        self.tops = tops

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in self.tops:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


def install(names: list[str]) -> list[str]:
    """Serve each of names (a top-level package) that cannot be found for real; returns those served.
    Called before the importing package loads; a finder placed last leaves every real module first."""
    absent = {name for name in names if importlib.util.find_spec(name) is None}
    if absent:
        sys.meta_path.append(_Finder(absent))
    return sorted(absent)


def used() -> list[str]:
    """The stand-in modules imported so far."""
    return sorted(_served)
