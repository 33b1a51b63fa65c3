"""Registries that turn a provider's or generator's to_dict() back into an object, by class.

Every subclass registers itself when its class is created. A dict names its class by short name
("type", as AITune does) and by path ("class"). The registries live in aitune_ray.records.registry, with the
backends' (a checkpoint resolves classes there without importing anything).
"""

from aitune_ray.records.imports import class_path
from aitune_ray.records.registry import CLASS_KEY, GENERATORS, PROVIDERS, TYPE_KEY, Registry

__all__ = ["CLASS_KEY", "GENERATORS", "PROVIDERS", "TYPE_KEY", "Registry", "class_path"]
