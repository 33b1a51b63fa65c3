"""The structure of a value (a module's outputs, a call's arguments) as plain data, and its rebuild.

``Structure.of(value)`` takes the tensor leaves out of any nesting of tuples, lists and dicts, their
subclasses included (a ``transformers`` ModelOutput, a namedtuple, an OrderedDict), and describes the rest
as JSON: each container with its class, each plain leaf (number, string, bool, None) with its value.
``rebuild(leaves)`` puts leaves back into that structure, with the same classes.

A class is named ``module:qualname`` (``tuple``, ``list`` and ``dict`` by their own names). Read back from
plain data (a checkpoint, a run folder), a name resolves only to a class already imported (found in
``sys.modules``) that is a subclass of tuple, list or dict: nothing is ever imported because a file names it.
A name that does not resolve so rebuilds as its base container (a namedtuple as one of that name and fields),
and says so once in the log.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import sys
from typing import Any

import torch

logger = logging.getLogger(__name__)

PLAIN_TYPES = (int, float, bool, str, type(None))
BASES = {"tuple": tuple, "list": list, "dict": dict}


def class_name(cls: type) -> str:
    """The name a structure stores for a container class."""
    if cls in (tuple, list, dict):
        return cls.__name__
    return f"{cls.__module__}:{cls.__qualname__}"


def base_name(obj: Any) -> str:
    return "dict" if isinstance(obj, dict) else "list" if isinstance(obj, list) else "tuple"


def resolve_class(name: str, base: str) -> type | None:
    """The class name names, where it is already imported and a subclass of base; else None."""
    if name in BASES:
        return BASES[name]
    module_name, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split(".") if found is not None and qualname else ():
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, BASES.get(base, ())):
        return found
    return None


def is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def make(cls: type, items: list, keys: list | None = None) -> Any:
    """An instance of container class cls holding items (under keys, for a mapping). A class that cannot be
    made so (a defaultdict, a tuple subclass with its own constructor) gives its base container."""
    try:
        if keys is not None:
            if cls is dict:
                return dict(zip(keys, items))
            if dataclasses.is_dataclass(cls):   # a ModelOutput: its fields by keyword
                return cls(**dict(zip(keys, items)))
            return cls(zip(keys, items))
        if cls in (tuple, list):
            return cls(items)
        if hasattr(cls, "_fields"):
            return cls(*items)
        return cls(items)
    except (TypeError, ValueError):
        if keys is not None:
            return dict(zip(keys, items))
        return list(items) if issubclass(cls, list) else tuple(items)


def _describe(obj: Any, leaves: list, classes: dict[str, type]) -> Any:
    if isinstance(obj, torch.Tensor):
        leaves.append(obj)
        return {"kind": "tensor"}
    if isinstance(obj, (tuple, list, dict)):
        name = class_name(type(obj))
        classes[name] = type(obj)
        node: dict[str, Any] = {"kind": base_name(obj), "class": name}
        if isinstance(obj, dict):
            keys = list(obj)
            odd = [k for k in keys if not isinstance(k, PLAIN_TYPES)]
            if odd:
                raise TypeError(f"a mapping key of type {type(odd[0]).__name__} cannot be described (keys must "
                                "be plain values)")
            node["keys"] = keys
            items = list(obj.values())
        else:
            items = list(obj)
            if is_namedtuple(obj):
                node["fields"] = list(type(obj)._fields)
        node["items"] = [_describe(v, leaves, classes) for v in items]
        return node
    if isinstance(obj, PLAIN_TYPES):
        return {"kind": "value", "value": obj}
    raise TypeError(f"a value of type {type(obj).__name__} cannot be described (tensors, plain values and "
                    "nested tuples, lists and dicts can)")


class Structure:
    """The plain-data structure of a value, and the classes to rebuild it with."""

    def __init__(self, spec: dict, classes: dict[str, type] | None = None):
        self.spec = spec
        self.classes = dict(classes or {})
        self.text = json.dumps(spec, sort_keys=True)   # one string: two structures (and their plain values) are equal iff these are
        self.leaf_count = _count_leaves(spec)

    @classmethod
    def of(cls, value: Any) -> tuple[list[torch.Tensor], "Structure"]:
        """(the tensor leaves of value, in order; its structure), the classes the live ones."""
        leaves: list[torch.Tensor] = []
        classes: dict[str, type] = {}
        spec = _describe(value, leaves, classes)
        return leaves, cls(spec, classes)

    def rebuild(self, leaves: list) -> Any:
        it = iter(leaves)
        return self._build(self.spec, it)

    def _build(self, node: dict, leaves) -> Any:
        kind = node["kind"]
        if kind == "tensor":
            return next(leaves)
        if kind == "value":
            return node["value"]
        items = [self._build(child, leaves) for child in node["items"]]
        return make(self._class(node), items, node.get("keys"))

    def _class(self, node: dict) -> type:
        name = node["class"]
        found = self.classes.get(name)
        if found is None:
            found = resolve_class(name, node["kind"])
            if found is None:
                found = _stand_in(name, node)
                logger.warning("output class %s is not imported here; it is rebuilt as a %s", name,
                               class_name(found))
            self.classes[name] = found
        return found

    def to_data(self) -> dict:
        return self.spec

    @classmethod
    def from_data(cls, data: Any) -> "Structure":
        """A structure read back from plain data: its classes resolve now (see the module docstring)."""
        structure = cls(_checked(data))
        structure._resolve(structure.spec)
        return structure

    def _resolve(self, node: dict) -> None:
        if node["kind"] in BASES:
            self._class(node)
            for child in node["items"]:
                self._resolve(child)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Structure) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Structure({self.text[:120]})"


def _count_leaves(node: dict) -> int:
    if node["kind"] == "tensor":
        return 1
    return sum(_count_leaves(child) for child in node.get("items", ()))


def _stand_in(name: str, node: dict) -> type:
    """The base container for a class that does not resolve (a namedtuple of the same name and fields)."""
    if "fields" in node:
        module_name, _, qualname = name.partition(":")
        return collections.namedtuple(qualname.rsplit(".", 1)[-1], node["fields"], module=module_name)
    return BASES[node["kind"]]


def _checked(node: Any) -> dict:
    """node, after checking it is a structure spec (plain data from a file)."""
    if not isinstance(node, dict) or node.get("kind") not in ("tensor", "value", *BASES):
        raise ValueError(f"not a structure entry: {str(node)[:80]}")
    if node["kind"] == "value" and not isinstance(node.get("value"), PLAIN_TYPES):
        raise ValueError(f"a structure value must be a number, string, bool or None: {str(node)[:80]}")
    if node["kind"] in BASES:
        if not isinstance(node.get("class"), str) or not isinstance(node.get("items"), list):
            raise ValueError(f"a structure container needs a class and items: {str(node)[:80]}")
        if "keys" in node and (not isinstance(node["keys"], list) or len(node["keys"]) != len(node["items"])):
            raise ValueError(f"a structure mapping needs one key per item: {str(node)[:80]}")
        for child in node["items"]:
            _checked(child)
    return node
