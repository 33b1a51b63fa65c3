"""Class and object paths ('package.module:Qualified.name'): the one place that writes and imports them."""

from __future__ import annotations

import importlib
from typing import Any

from aitune_ray.errors import ConfigError


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def short_name(path: str) -> str:
    """The last name of a path: 'aitune_ray.backend.torch_eager:TorchEagerBackend' -> 'TorchEagerBackend'."""
    return str(path or "").rpartition(":")[2].rpartition(".")[2]


def import_object(path: str, what: str = "") -> Any:
    """Import 'package.module:name' (name may be dotted). ConfigError, naming what, when it cannot be found."""
    prefix = f"{what}: " if what else ""
    module_name, sep, qualname = str(path).partition(":")
    if not sep or not module_name or not qualname:
        raise ConfigError(f"{prefix}expected an import path 'package.module:name', got {path!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{prefix}cannot import module {module_name!r} ({exc})") from exc
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ConfigError(f"{prefix}{module_name!r} has no {qualname!r}") from exc
    return obj


def import_class(path: str, base: type) -> type:
    """Import 'package.module:Class' and check that it subclasses base (never unpickles)."""
    obj = import_object(path)
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise ConfigError(f"{path!r} is not a {base.__name__} subclass")
    return obj
