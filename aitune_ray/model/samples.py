"""Recorded module inputs and eager outputs, and helpers for nested structures.

A structure is any nesting of tuples, lists and dicts whose leaves are tensors
or plain values (numbers, strings, None, booleans). Containers keep their class
(a ModelOutput, a namedtuple, an OrderedDict) through every helper here.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable

import torch

from aitune_ray.model.structure import PLAIN_TYPES, make


def map_structure(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply fn to every tensor leaf, keeping the nesting and each container's class."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (tuple, list)):
        return make(type(obj), [map_structure(v, fn) for v in obj])
    if isinstance(obj, dict):
        return make(type(obj), [map_structure(v, fn) for v in obj.values()], list(obj))
    return obj


def tensors_of(obj: Any) -> list[torch.Tensor]:
    """The tensor leaves of a structure, in a stable order."""
    found: list[torch.Tensor] = []
    _collect(obj, found)
    return found


def _collect(obj: Any, found: list) -> None:
    if isinstance(obj, torch.Tensor):
        found.append(obj)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            _collect(v, found)
    elif isinstance(obj, dict):
        for v in obj.values():
            _collect(v, found)


def check_recordable(obj: Any, where: str = "input") -> None:
    """Raise TypeError naming the first leaf that is neither a tensor nor a plain value."""
    if isinstance(obj, torch.Tensor) or isinstance(obj, PLAIN_TYPES):
        return
    if isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            check_recordable(v, f"{where}[{i}]")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            check_recordable(v, f"{where}[{k!r}]")
        return
    raise TypeError(f"{where} has type {type(obj).__name__}, which cannot be recorded "
                    "(tensors, numbers, strings, None and nested tuples/lists/dicts can)")


def describe(obj: Any) -> Any:
    """A JSON-serializable signature of a structure: shapes and dtypes of tensors, values of plain leaves."""
    if isinstance(obj, torch.Tensor):
        return {"tensor": list(obj.shape), "dtype": str(obj.dtype).replace("torch.", "")}
    if isinstance(obj, (tuple, list)):
        return {"seq": [describe(v) for v in obj], "kind": type(obj).__name__}
    if isinstance(obj, dict):
        return {"map": {str(k): describe(v) for k, v in obj.items()}}
    return {"value": obj if isinstance(obj, PLAIN_TYPES) else repr(obj)}


def detach_clone(obj: Any) -> Any:
    return map_structure(obj, lambda t: t.detach().clone())


def move(obj: Any, device: torch.device | str) -> Any:
    return map_structure(obj, lambda t: t.to(device))


def batch_size_of(args: tuple, kwargs: dict) -> int:
    """The leading dimension of the first tensor input with at least one dimension (1 if none)."""
    first = args[0] if args else None
    if isinstance(first, torch.Tensor) and first.dim() > 0:   # the usual call, read without walking the inputs
        return int(first.shape[0])
    for t in tensors_of((args, kwargs)):
        if t.dim() > 0:
            return int(t.shape[0])
    return 1


@dataclasses.dataclass
class Sample:
    """One recorded call: its inputs and what eager returned for them."""

    args: tuple
    kwargs: dict
    outputs: Any
    batch_size: int

    def to(self, device: torch.device | str) -> "Sample":
        return Sample(move(self.args, device), move(self.kwargs, device), move(self.outputs, device),
                      self.batch_size)


@dataclasses.dataclass
class SampleStore:
    """The samples of one module, plus how many calls were seen in all."""

    samples: list[Sample] = dataclasses.field(default_factory=list)
    calls_seen: int = 0

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self):
        return iter(self.samples)

    def batch_sizes(self) -> list[int]:
        return sorted({s.batch_size for s in self.samples})

    def call_mix(self) -> dict[int, int]:
        """How many recorded calls had each batch size."""
        return dict(sorted(collections.Counter(s.batch_size for s in self.samples).items()))

    def first_of_batch_size(self, batch_size: int) -> Sample:
        return next(s for s in self.samples if s.batch_size == batch_size)

    def to(self, device: torch.device | str) -> "SampleStore":
        return SampleStore([s.to(device) for s in self.samples], self.calls_seen)

    def signature(self) -> dict:
        """Input and output signature of the first sample, for manifests and reports."""
        if not self.samples:
            return {}
        s = self.samples[0]
        return {"args": describe(s.args), "kwargs": describe(s.kwargs), "outputs": describe(s.outputs),
                "batch_sizes": self.batch_sizes()}
