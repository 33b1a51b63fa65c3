"""wrap(): put aitune_ray.Module in place of the modules inspect() reported, where the pipeline holds them."""

from __future__ import annotations

import logging
from typing import Any

from aitune_ray.errors import ConfigError
from aitune_ray.inspecting.module_info import InspectedModulesInfo, ModuleInfo
from aitune_ray.api.module import Module

logger = logging.getLogger(__name__)


def wrap(obj: object, modules: list[ModuleInfo], strategy=None, strategies=None) -> object:
    """Wrap each module of modules (ModuleInfos from inspect(obj, ...).get_modules(...)) in
    aitune_ray.Module(module, name=its name, strategy=strategy, strategies=strategies), in its place on obj.

    Returns obj; or, when the list holds obj itself (a pipeline that is one module), obj wrapped, which the
    caller must use in its place. A module that no longer stands where inspect() found it is refused."""
    if isinstance(modules, InspectedModulesInfo):
        modules = modules.get_modules()
    for info in modules:
        if not isinstance(info, ModuleInfo):
            raise ConfigError(f"wrap: modules holds a {type(info).__name__}; pass inspect(...).get_modules(...)")
        where = info.object_path or type(obj).__name__
        if info.parent is None:
            if info.module is not obj:
                raise ConfigError(f"wrap: {where} was found on another object than {type(obj).__name__}")
            logger.info("wrap: %s (the whole object)", where)
            return Module(obj, name=obj.__class__.__name__, strategy=strategy, strategies=strategies)
        try:
            current = info.parent.child(info.name)
        except (AttributeError, LookupError, ValueError):
            current = None
        if current is not info.module:
            raise ConfigError(f"wrap: {where} no longer holds the module inspect() found there "
                              "(it was wrapped or replaced since)")
        logger.info("wrap: %s as %r", where, info.name)
        info.parent.set_wrapped(info.name, Module(info.module, name=info.name, strategy=strategy,
                                                  strategies=strategies))
    return obj
