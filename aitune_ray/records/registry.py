"""Known classes: how plain data that names a class (a backend spec, a kernel provider's to_dict()) finds it.

Every Backend, KernelProvider and KernelGenerator subclass adds itself to its base's registry when its class
is created (``__init_subclass__``): the built-ins when aitune_ray is imported, a user's own classes when the
user's code defines or imports them. A class is named by its path, ``"package.module:Qualname"``.

Two ways to resolve a name:
- trusted data that this program made itself (the driver's specs sent to Ray actors, job files the user
  wrote): a name not registered yet is imported by its path, since an actor has not imported the user's
  module;
- untrusted data (a checkpoint, inside ``untrusted()``): only registered classes and the classes passed to
  ``untrusted(...)`` are found; anything else is an UnknownClassError and nothing is imported, so a file
  never chooses which code runs.

The untrusted mode is a context variable: it covers the loading thread (and tasks started in its context),
not threads that a backend might start while restoring.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Iterable, Iterator

from aitune_ray.errors import ConfigError, UnknownClassError
from aitune_ray.records.imports import class_path, import_class, short_name

logger = logging.getLogger(__name__)

TYPE_KEY = "type"
CLASS_KEY = "class"

# None: trusted (imports allowed). A tuple of classes: untrusted, and these classes are allowed as well.
_ALLOWED: contextvars.ContextVar[tuple[type, ...] | None] = contextvars.ContextVar("aitune_ray_untrusted",
                                                                                   default=None)


@contextlib.contextmanager
def untrusted(allowed: Iterable[type] = ()) -> Iterator[None]:
    """Within this block names resolve to registered classes or to those in allowed, never by import."""
    token = _ALLOWED.set(tuple(allowed) + (_ALLOWED.get() or ()))
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def imports_allowed() -> bool:
    return _ALLOWED.get() is None


class Registry:
    """The classes of one base, by path and by short name."""

    def __init__(self, what: str, option: str):
        self.what = what
        self.option = option              # the load() argument that allows a class explicitly
        self._by_path: dict[str, type] = {}
        self._by_name: dict[str, list[type]] = {}

    def add(self, cls: type) -> None:
        path = class_path(cls)
        old = self._by_path.get(path)
        if old is not None and old is not cls:
            logger.debug("%s %s is defined again; the newer class is used", self.what, path)
            self._by_name[cls.__name__] = [c for c in self._by_name.get(cls.__name__, []) if c is not old]
        self._by_path[path] = cls
        self._by_name.setdefault(cls.__name__, []).append(cls)

    def known(self) -> list[str]:
        return sorted(self._by_path)

    def registered(self, path: str) -> type | None:
        """The class registered at path, or None: never imports."""
        return self._by_path.get(path) if isinstance(path, str) else None

    def resolve(self, path: str, base: type) -> type:
        """The class at path: registered, allowed explicitly, or (trusted data only) imported."""
        if not isinstance(path, str) or not path:
            raise ConfigError(f"{self.what} type {path!r} is not a class path 'package.module:Class'")
        cls = self._by_path.get(path)
        if cls is None:
            allowed = _ALLOWED.get()
            if allowed is None:
                return import_class(path, base)
            cls = _explicit(path, allowed, base)
            if cls is None:
                raise UnknownClassError(
                    f"{self.what} type {path!r} is not a known {base.__name__} class, and a checkpoint never "
                    f"imports the code it names (nothing was imported). If you trust this file, import the "
                    f"module that defines it before loading, or pass the class: "
                    f"load(..., {self.option}=[{short_name(path) or 'TheClass'}])")
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ConfigError(f"{path!r} is not a {base.__name__} subclass")
        return cls

    def find(self, data: dict, base: type) -> type:
        """The class a to_dict() names: by path first, then by a short name that is unique."""
        path = data.get(CLASS_KEY)
        if path:
            return self.resolve(path, base)
        name = data.get(TYPE_KEY)
        found = self._by_name.get(name, []) if isinstance(name, str) else []
        if len(found) == 1:
            return found[0]
        if not found:
            raise ConfigError(f"unknown {self.what} type {name!r}; known: {sorted(self._by_name)}")
        raise ConfigError(f"{self.what} type {name!r} is ambiguous ({[class_path(c) for c in found]}); "
                          f"give its path as {CLASS_KEY!r}")


def _explicit(path: str, allowed: tuple[type, ...], base: type) -> type | None:
    """A class passed explicitly: by its path, else by its name when only one passed class has that name."""
    classes = [c for c in allowed if isinstance(c, type) and issubclass(c, base)]
    for cls in classes:
        if class_path(cls) == path:
            return cls
    same = [c for c in classes if c.__name__ == short_name(path)]
    return same[0] if len(same) == 1 else None


BACKENDS = Registry("backend", "backends")
PROVIDERS = Registry("kernel provider", "providers")
GENERATORS = Registry("kernel generator", "providers")


# The wrapper a user calls (aitune_ray.Module sets itself here as its module is imported, which importing
# aitune_ray does in every process): the worker core times each candidate behind it, as the user calls it,
# without importing the API layer above the worker.
_USER_WRAPPER: list[type] = []


def set_user_wrapper(cls: type) -> None:
    _USER_WRAPPER[:] = [cls]


def user_wrapper() -> type:
    if not _USER_WRAPPER:
        raise ConfigError("aitune_ray.Module is not defined in this process: import aitune_ray first")
    return _USER_WRAPPER[0]
