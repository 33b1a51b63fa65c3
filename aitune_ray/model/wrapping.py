"""Module surgery: find the submodule at an attribute path ("encoder.layers.0") and put a wrapper there.

One implementation for the job runner (wrap the modules a job file names) and for checkpoint loading (wrap
the plain modules that stand where a checkpoint has a Module). The wrapper class is given by the caller, so
that this file imports nothing of aitune_ray but its errors.
"""

from __future__ import annotations

from typing import Any

from aitune_ray.errors import ConfigError


def child(obj: Any, attr: str) -> Any:
    """obj.attr, or obj[attr] for a list or tuple and a numeric attr. AttributeError/IndexError if absent."""
    if isinstance(obj, (list, tuple)) and attr.isdigit():
        return obj[int(attr)]
    return getattr(obj, attr)


def parent_of(root: Any, path: str, key: str) -> tuple[Any, str]:
    """(the object holding the attribute path's last part, that part); ConfigError naming key if absent."""
    parts = path.split(".")
    obj = root
    for depth, part in enumerate(parts):
        try:
            value = child(obj, part)
        except (AttributeError, IndexError):
            where = ".".join(parts[:depth]) or "the model"
            raise ConfigError(f"{key}: {where} ({type(obj).__name__}) has no attribute {part!r}") from None
        if depth == len(parts) - 1:
            return obj, part
        obj = value
    raise ConfigError(f"{key}: empty path")  # not reached: str.split gives at least one part


def put(parent: Any, attr: str, value: Any) -> None:
    """Replace parent's attribute (or list item) attr with value."""
    if isinstance(parent, list) and attr.isdigit():
        parent[int(attr)] = value
    else:
        setattr(parent, attr, value)


def plain_module_at(root: Any, path: str, wrapper: type) -> tuple[Any, str, Any] | None:
    """(parent, attr, module) when an nn.Module that is not a wrapper stands at path, else None."""
    from torch import nn

    try:
        parent, attr = parent_of(root, path, "path")
        value = child(parent, attr)
    except ConfigError:
        return None
    if isinstance(value, nn.Module) and not isinstance(value, wrapper):
        return parent, attr, value
    return None


def wrap_modules(model: Any, specs: list, strategy_factory, Module: type):  # noqa: N803 - a class
    """Wrap the submodules named by specs (job ModuleSpecs) in Module (aitune_ray.Module), in place.

    Returns (root, modules): root is what to call (the model, or its wrapper when the whole model is
    wrapped) and modules maps each name to its Module.
    """
    from torch import nn

    modules: dict[str, Any] = {}
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
        parent, attr = parent_of(model, spec.path, key)
        target = child(parent, attr)
        if not isinstance(target, nn.Module):
            raise ConfigError(f"{key}: {spec.path!r} is a {type(target).__name__}, not a torch.nn.Module")
        wrapped = Module(target, name=spec.name or spec.path, strategy=strategy, max_samples=spec.max_samples)
        if wrapped.name in modules:
            raise ConfigError(f"modules[{index}].name: {wrapped.name!r} is used twice")
        put(parent, attr, wrapped)
        modules[wrapped.name] = wrapped
    return root, modules
