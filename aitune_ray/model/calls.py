"""A call's arguments bound by name to the module's forward, and the form of a call that a graph was made from.

Users call a module with keywords, in any order (``model(attention_mask=m, input_ids=ids)``). ``bind``
puts a call into one canonical form: forward's parameters in their order, positional where forward takes
them so, defaults filled in, keyword-only and ``**kwargs`` ones by sorted name. Two calls that mean the same
bind to the same (args, kwargs); a backend that numbers its graph inputs numbers the tensor leaves of that
form.

A graph exported from one recorded call holds that call's non-tensor arguments (floats, bools, ints, None,
strings) as constants. ``CallForm`` is that call's structure with those values baked in: ``leaves(args,
kwargs)`` gives a later call's tensors in graph order when the later call has the same structure and the
same non-tensor values, and None when it does not (the backend then runs that call eagerly: a graph never
answers a call it was not made for).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from aitune_ray.model.samples import Sample, SampleStore
from aitune_ray.model.structure import PLAIN_TYPES, Structure


def forward_signature(module: nn.Module) -> inspect.Signature | None:
    """The signature of module.forward, or None where it has none that Python can read."""
    try:
        return inspect.signature(module.forward)
    except (TypeError, ValueError):
        return None


def bind(signature: inspect.Signature | None, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """(args, kwargs) in canonical form (see the module docstring); as given where they do not bind."""
    if signature is None:
        return tuple(args), dict(kwargs)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return tuple(args), dict(kwargs)
    given = set(bound.arguments)
    bound.apply_defaults()
    for name, param in signature.parameters.items():   # a default that is no plain value stays out
        if name not in given and param.default is not param.empty and not isinstance(param.default, PLAIN_TYPES):
            del bound.arguments[name]
    return tuple(bound.args), dict(sorted(bound.kwargs.items()))


def bound_samples(module: nn.Module, samples: SampleStore) -> SampleStore:
    """samples with each call in canonical form for module."""
    signature = forward_signature(module)
    out = []
    for s in samples:
        args, kwargs = bind(signature, s.args, s.kwargs)
        out.append(Sample(args, kwargs, s.outputs, s.batch_size))
    return SampleStore(out, samples.calls_seen)


class CallForm:
    """The structure of one call in canonical form, its non-tensor values included (see the module docstring)."""

    def __init__(self, structure: Structure, signature: inspect.Signature | None):
        self.structure = structure
        self.signature = signature

    @classmethod
    def of(cls, module: nn.Module, args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], "CallForm"]:
        """(the call's tensors in canonical order, its form)."""
        signature = forward_signature(module)
        leaves, structure = Structure.of(bind(signature, args, kwargs))
        return leaves, cls(structure, signature)

    def leaves(self, args: tuple, kwargs: dict) -> list[torch.Tensor] | None:
        """The call's tensors in graph order, or None where its form (non-tensor values included) differs."""
        try:
            leaves, structure = Structure.of(bind(self.signature, args, kwargs))
        except TypeError:   # a value no structure holds: not a call the graph was made for
            return None
        return leaves if structure.text == self.structure.text else None

    def rebuild(self, leaves: list) -> tuple[tuple, dict]:
        """(args, kwargs) of the recorded call with these tensors in it."""
        args, kwargs = self.structure.rebuild(leaves)
        return tuple(args), dict(kwargs)

    def constants(self) -> dict[str, Any]:
        """The non-tensor values baked into the form, by where they are (for messages)."""
        found: dict[str, Any] = {}
        names = list(self.signature.parameters) if self.signature is not None else []

        def walk(node: dict, where: str) -> None:
            if node["kind"] == "value":
                found[where] = node["value"]
            for i, child in enumerate(node.get("items", ())):
                keys = node.get("keys")
                walk(child, f"{where}[{keys[i]!r}]" if keys is not None else f"{where}[{i}]")

        args_node, kwargs_node = self.structure.spec["items"]
        for i, child in enumerate(args_node["items"]):
            walk(child, names[i] if i < len(names) else f"args[{i}]")
        for key, child in zip(kwargs_node["keys"], kwargs_node["items"]):
            walk(child, str(key))
        return found

    def to_data(self) -> dict:
        return self.structure.to_data()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CallForm) and other.structure == self.structure

    __hash__ = None

    @classmethod
    def from_data(cls, data: Any, module: nn.Module) -> "CallForm":
        return cls(Structure.from_data(data), forward_signature(module))
