"""A call's arguments bound by name to the module's forward, and the form of a call that a graph was made from.

Users call a module with keywords, in any order (``model(attention_mask=m, input_ids=ids)``). ``bind``
puts a call into one canonical form: the arguments given, by name in forward's order (positional only where
forward takes them only so), ``**kwargs`` ones by sorted name; a parameter not given is left to forward's
default, so a decorator that fills keywords itself (transformers' do) never sees one twice. Two calls that mean the same
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

from aitune_ray.model.samples import Sample, SampleStore, tensors_of
from aitune_ray.model.structure import PLAIN_TYPES, Structure


#: How many call shapes a CallForm remembers (a serving loop makes a handful).
MAX_PLANS = 64
MISMATCH = "mismatch"
_TENSOR = object()


def _shape_key(obj: Any) -> Any:
    """A hashable key of a call as given: its nesting, keyword names in order, and non-tensor values."""
    if isinstance(obj, torch.Tensor):
        return _TENSOR
    if isinstance(obj, (tuple, list)):
        return type(obj), tuple(_shape_key(v) for v in obj)
    if isinstance(obj, dict):
        return type(obj), tuple((k, _shape_key(v)) for k, v in obj.items())
    return type(obj), obj


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
    params = signature.parameters
    if any(p.kind is p.VAR_POSITIONAL and bound.arguments.get(n) for n, p in params.items()):
        return tuple(bound.args), dict(bound.kwargs)   # extra positional items: Python's own split
    positional, named, extra = [], {}, {}
    for name, param in params.items():
        if name not in bound.arguments:
            continue   # not given: forward's own default, as in the user's call
        value = bound.arguments[name]
        if param.kind is param.POSITIONAL_ONLY:
            positional.append(value)
        elif param.kind is param.VAR_KEYWORD:
            extra = dict(sorted(value.items()))
        elif param.kind is not param.VAR_POSITIONAL:
            named[name] = value
    return tuple(positional), {**named, **extra}


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
        self._plans: dict = {}   # a call's shape as given -> where its graph-order tensors are, or MISMATCH

    @classmethod
    def of(cls, module: nn.Module, args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], "CallForm"]:
        """(the call's tensors in canonical order, its form)."""
        signature = forward_signature(module)
        leaves, structure = Structure.of(bind(signature, args, kwargs))
        return leaves, cls(structure, signature)

    def leaves(self, args: tuple, kwargs: dict) -> list[torch.Tensor] | None:
        """The call's tensors in graph order, or None where its form (non-tensor values included) differs.
        A call shaped as an earlier one (same positions, keyword names and order, non-tensor values) takes
        the earlier answer's plan: binding and describing a call costs about 0.1 ms, more than some graphs."""
        try:
            key = _shape_key((args, kwargs))
            plan = self._plans.get(key)
        except TypeError:   # an unhashable value: no plan is kept for it
            key = plan = None
        if plan is None:
            plan = self._plan(args, kwargs)
            if key is not None and len(self._plans) < MAX_PLANS:
                self._plans[key] = plan
        if plan is MISMATCH:
            return None
        given = tensors_of((args, kwargs))
        return [given[i] for i in plan]

    def _plan(self, args: tuple, kwargs: dict):
        try:
            leaves, structure = Structure.of(bind(self.signature, args, kwargs))
        except TypeError:   # a value no structure holds: not a call the graph was made for
            return MISMATCH
        if structure.text != self.structure.text:
            return MISMATCH
        given = {id(t): i for i, t in reversed(list(enumerate(tensors_of((args, kwargs)))))}
        return tuple(given[id(t)] for t in leaves)

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
