"""A small validator of plain data (parsed YAML or JSON) against dataclasses with type hints.

Used for job files, backend and measure configs, and checkpoint manifests. A problem is a one-line
ConfigError that starts with the key path, e.g. ``strategy.min_speedup_ratio: expected a number, got str``.
A field may bound its numbers with ``dataclasses.field(metadata={"min": 0, "max": 100})``; every number
must be finite and at most LARGEST in size, so that a typo of many digits never reaches a run.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from typing import Any

from aitune_ray.errors import ConfigError

LARGEST = 2 ** 53


def bounded(default: Any, low: float | None = None, high: float | None = None) -> Any:
    """A dataclass field whose number must lie in [low, high] (either may be None)."""
    return dataclasses.field(default=default, metadata={"min": low, "max": high})


def from_data(cls: type, data: Any, key: str, build: bool = True) -> Any:
    """Check a mapping against dataclass cls (unknown keys, missing keys, types, bounds), then build it.

    With build=False only the check is done and the checked values are returned (for classes whose own
    constructor converts values). A class with ``open_keys = True`` ignores keys it does not declare.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{key or 'job'}: expected a mapping, got {kind_of(data)}")
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a user class whose annotations cannot be resolved: leave its checks to it
        hints = {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in data:
        if name not in fields and not getattr(cls, "open_keys", False):
            raise ConfigError(f"{join_key(key, _shown(name))}: unknown key; known keys: {', '.join(fields)}")
    values = {}
    for name, field in fields.items():
        where = join_key(key, name)
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{where}: required key is missing")
            continue
        values[name] = check_value(data[name], hints.get(name, Any), where)
        _check_bounds(values[name], field.metadata, where)
    return cls(**values) if build else values


def check_plain_fields(cls: type, data: dict, key: str) -> None:
    """Check the types and bounds of data's fields of cls that hold plain values; fields typed with a dataclass
    or Any are left to cls itself (its __post_init__ converts them)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: leave the checks to cls
        return
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, value in data.items():
        hint = hints.get(name, Any)
        if name not in fields or hint is Any or any(dataclasses.is_dataclass(o) for o in typing.get_args(hint)):
            continue
        _check_bounds(check_value(value, hint, join_key(key, name)), fields[name].metadata, join_key(key, name))


def check_value(value: Any, tp: Any, key: str) -> Any:
    """Check value against a type hint; return it converted (ints to floats, mappings to dataclasses)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(value, key)
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        for option in options:
            if _matches(value, option):
                return check_value(value, option, key)
        raise ConfigError(f"{key}: expected {' or '.join(_describe(o) for o in options)}, got {kind_of(value)}")
    if not _matches(value, tp):
        raise ConfigError(f"{key}: expected {_describe(tp)}, got {kind_of(value)}")
    if dataclasses.is_dataclass(tp):
        return from_data(tp, value, key)
    if tp is float:
        return float(value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return value
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [check_value(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        key_type, item = typing.get_args(tp) or (Any, Any)
        for name in value:
            if key_type is str and not isinstance(name, str):
                raise ConfigError(f"{join_key(key, _shown(name))}: keys must be strings, got {kind_of(name)}")
        return {k: check_value(v, item, join_key(key, _shown(k))) for k, v in value.items()}
    return value


def _check_number(value: float, key: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: expected a finite number, got {value}")
    if abs(value) > LARGEST:
        raise ConfigError(f"{key}: {_short(value)} is implausibly large (at most {LARGEST})")


def _check_bounds(value: Any, metadata: Any, key: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    low, high = metadata.get("min"), metadata.get("max")
    if low is not None and value < low:
        raise ConfigError(f"{key}: must be at least {low}, got {_short(value)}")
    if high is not None and value > high:
        raise ConfigError(f"{key}: must be at most {high}, got {_short(value)}")


def _matches(value: Any, tp: Any) -> bool:
    """Whether value is of the kind tp names (the outer kind only; check_value looks inside)."""
    if tp is Any or tp is object:
        return True
    if tp is type(None) or tp is None:
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if any(value == m.value or value == m.name or value is m for m in tp):
            return True
        try:   # the enum's own other spellings (its _missing_: AITune's short provider names)
            tp(value)
        except (ValueError, TypeError):
            return False
        return isinstance(value, (str, int))
    origin = typing.get_origin(tp) or tp
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, o) for o in typing.get_args(tp))
    if origin is list:
        return isinstance(value, list)
    if origin is tuple:
        return isinstance(value, (list, tuple))
    if origin is dict:
        return isinstance(value, dict)
    if isinstance(origin, type):
        return isinstance(value, origin)
    return True


def _describe(tp: Any) -> str:
    if tp is type(None) or tp is None:
        return "null"
    if tp is bool:
        return "a boolean"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    origin = typing.get_origin(tp) or tp
    if origin is list or origin is tuple:
        return "a list"
    if origin is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def join_key(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def _shown(name: Any) -> str:
    """A key as it appears in a message: short and on one line."""
    text = str(name)
    return repr(text[:40] + "...") if len(text) > 40 or not text.isprintable() else text


def _short(value: Any) -> str:
    if isinstance(value, int) and abs(value) > LARGEST:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"
