"""Registries that turn a provider's or generator's to_dict() back into an object, by class.

Every subclass registers itself when its class is created. A dict names its class by short name
("type", as AITune does) and by import path ("class"); the import path lets another process that
has not imported the class yet find it. Nothing is unpickled: a class is only imported by its path
and must subclass the expected base.
"""

from __future__ import annotations

import logging

from aitune_ray.errors import ConfigError
from aitune_ray.imports import class_path, import_class

logger = logging.getLogger(__name__)

TYPE_KEY = "type"
CLASS_KEY = "class"


class Registry:
    """Classes of one base, by import path and by short name."""

    def __init__(self, what: str):
        self.what = what
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

    def find(self, data: dict, base: type) -> type:
        """The class a to_dict() names: by import path first, then by a short name that is unique."""
        path = data.get(CLASS_KEY)
        if path:
            if path in self._by_path:
                return self._by_path[path]
            return import_class(path, base)
        name = data.get(TYPE_KEY)
        found = self._by_name.get(name or "", [])
        if len(found) == 1:
            return found[0]
        if not found:
            raise ConfigError(f"unknown {self.what} type {name!r}; known: {sorted(self._by_name)}")
        raise ConfigError(f"{self.what} type {name!r} is ambiguous ({[class_path(c) for c in found]}); "
                          f"give its import path as {CLASS_KEY!r}")
