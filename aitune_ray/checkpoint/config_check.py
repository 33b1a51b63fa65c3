"""Backend config fields a checkpoint may choose, checked before a backend is restored from one.

A config field can name a program (Inductor's ``cpp.cxx``), a library (ONNX Runtime TensorRT EP's
``trt_extra_plugin_lib_paths``), or a file or folder to read or write (``trace.debug_dir``, timing caches,
engine cache folders). JIT backends are rebuilt at load from the manifest's config, so such a field would
let a file choose which code runs or where files go. The rule, in one place: each built-in config declares
next to its fields what a checkpoint may set (``BackendConfig.safe_fields``), an allow-list:

- ``SAFE``: any value (a switch, a size, a name the library looks up among its own);
- a set of keys: a mapping whose keys must all be among them (options known to name no path);
- a mapping of key -> rule: a nested mapping, each key by its own rule;
- bool, int, float or str: a value of that type (an int for a float; a bool is no int; a str of at most
  MAX_TEXT characters; None keeps the library's default);
- a BackendConfig class: a nested config, by that class's own declaration.

A field that is not declared must keep its default value. Anything else is refused with a one-line
``CheckpointError`` naming the field, unless the file is trusted (allow_native_code=True, or a checkpoint
verified against the caller's signing key). A config class of the user's own (safe_fields None) is read
by the user's own code and not judged here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aitune_ray.backend.backend import SAFE, BackendConfig, _plain
from aitune_ray.checkpoint import format as fmt
from aitune_ray.checkpoint.artifact_check import TRUST_HINT, parts_of
from aitune_ray.errors import CheckpointError

MAX_TEXT = 200
SCALARS = (bool, int, float, str)


def check_configs(module: str, backend, trusted: bool) -> None:
    """Refuse (unless trusted) a config of backend, or of a backend inside it, that sets a field its class
    does not declare safe."""
    if trusted:
        return
    for part in parts_of(backend):
        found = unsafe_field(part.config)
        if found is not None:
            field, value = found
            raise CheckpointError(
                f"module {module!r}: {type(part).__name__}'s config sets {field} = {fmt.shown(value, 60)}, which is "
                "not among the settings a checkpoint may choose (it can name a program, a library, a file or a "
                f"folder); {TRUST_HINT}")


def unsafe_field(config: BackendConfig) -> tuple[str, Any] | None:
    """(the field's dotted name, its value) of the first field config sets beyond its declaration, or None."""
    rules = type(config).safe_fields
    if rules is None:
        return None
    name = type(config).__name__
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.name not in rules:
            if _plain(value) != _plain(_default(field)):
                return f"{name}.{field.name}", _plain(value)
            continue
        found = _check(rules[field.name], value, f"{name}.{field.name}")
        if found is not None:
            return found
    return None


def _check(rule: Any, value: Any, where: str) -> tuple[str, Any] | None:
    if rule is SAFE or value is None:
        return None
    if rule in SCALARS:
        return None if _of_type(value, rule) else (where, _plain(value))
    if isinstance(rule, type) and issubclass(rule, BackendConfig):
        if not isinstance(value, rule):
            return where, _plain(value)
        found = unsafe_field(value)
        return None if found is None else (f"{where}.{found[0].partition('.')[2]}", found[1])
    if not isinstance(value, dict):
        return where, _plain(value)
    for key, item in value.items():
        if isinstance(rule, (set, frozenset)):
            if key not in rule:
                return f"{where}[{key!r}]", _plain(item)
        elif key not in rule:
            return f"{where}[{key!r}]", _plain(item)
        else:
            found = _check(rule[key], item, f"{where}[{key!r}]")
            if found is not None:
                return found
    return None


def _of_type(value: Any, rule: type) -> bool:
    if rule is bool or isinstance(value, bool):
        return rule is bool and isinstance(value, bool)
    if rule is float:
        return isinstance(value, (int, float))
    if rule is str:
        return isinstance(value, str) and len(value) <= MAX_TEXT and value.isprintable()
    return isinstance(value, rule)


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING
