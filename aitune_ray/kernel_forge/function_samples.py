"""Recorded calls of one torch.nn.functional function: distinct samples, call counts and the benchmark mix.

A FunctionSample is one call's (args, kwargs); it unpacks like AITune's ``(args, kwargs)`` pairs, so
``for args, kwargs in samples`` works in a provider's ``_prepare``. FunctionData is what the profiler
records per function: the distinct samples, each with how many calls had it.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, NamedTuple

import torch

from aitune_ray.model.samples import detach_clone, map_structure, tensors_of


class FunctionSample(NamedTuple):
    """One call of a functional: positional and keyword arguments."""

    args: tuple
    kwargs: dict


#: Distinct samples of one function, each with its call count, in order of first call.
FunctionData = list[tuple[int, FunctionSample]]


def sample_key(obj: Any) -> Any:
    """A hashable key of a call's arguments: exact shape, dtype, device and strides of every tensor,
    the values of everything else. Two calls with equal keys are one distinct sample."""
    if isinstance(obj, torch.Tensor):
        return ("T", tuple(obj.shape), str(obj.dtype), str(obj.device), tuple(obj.stride()))
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, tuple(sample_key(v) for v in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((str(k), sample_key(v)) for k, v in obj.items()))
    try:
        hash(obj)
    except TypeError:
        return ("repr", type(obj).__name__, repr(obj))
    return ("V", type(obj).__name__, obj)


_PLAIN = (bool, int, float, str, type(None))


@functools.lru_cache(maxsize=None)
def _defaults(func: Any) -> dict[str, Any]:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):   # a builtin without a signature: torch passes only what the caller gave
        return {}
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def fit_keywords(func: Any, kwargs: dict, accepted: frozenset | None) -> dict:
    """kwargs for a replacement of func that takes the keyword names in accepted (None: any keyword).
    A Python-level functional (F.relu) hands the torch function machinery every keyword, defaults included
    (inplace=False): one the replacement cannot take is left out when it is at func's default, so that a
    kernel provider written as AITune's are, _infer(self, x), is called as the caller wrote F.relu(x).
    A keyword away from its default is passed on, and a replacement that cannot take it fails there."""
    if accepted is None or not kwargs or all(k in accepted for k in kwargs):
        return kwargs
    try:
        defaults = _defaults(func)
    except TypeError:   # an unhashable callable
        return kwargs
    return {k: v for k, v in kwargs.items()
            if k in accepted or not (k in defaults and isinstance(v, _PLAIN) and type(v) is type(defaults[k])
                                     and v == defaults[k])}


def keep_sample(args: tuple, kwargs: dict) -> FunctionSample:
    """A copy of a call's arguments that later in-place work cannot change (strides are kept)."""
    args, kwargs = detach_clone((tuple(args), dict(kwargs)))
    return FunctionSample(args, kwargs)


def fresh_copy(sample: FunctionSample) -> FunctionSample:
    """A copy to call a function with, so that an in-place function cannot spoil the recorded sample."""
    return FunctionSample(*map_structure((sample.args, sample.kwargs), lambda t: t.clone()))


def as_function_data(samples: Any) -> FunctionData:
    """Accept FunctionData, or a plain list of samples / (args, kwargs) pairs (each counted once)."""
    data: FunctionData = []
    for item in samples:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int) \
                and isinstance(item[1], tuple):
            count, sample = item
            data.append((int(count), FunctionSample(tuple(sample[0]), dict(sample[1]))))
        else:
            args, kwargs = item
            data.append((1, FunctionSample(tuple(args), dict(kwargs))))
    return data


def benchmark_mix(data: FunctionData) -> list[FunctionSample]:
    """The recorded call mix reduced by the GCD of the counts: counts (6, 4, 2) give 3, 2 and 1 calls."""
    counts = [count for count, _ in data if count > 0]
    if not counts:
        return []
    divisor = 0
    for count in counts:
        divisor = math.gcd(divisor, count)
    mix: list[FunctionSample] = []
    for count, sample in data:
        mix.extend([sample] * (count // divisor))
    return mix


def tensor_bytes(sample: FunctionSample) -> int:
    """Bytes held by the tensor arguments of one sample."""
    return sum(t.numel() * t.element_size() for t in tensors_of((sample.args, sample.kwargs)))


def device_of(samples: list[FunctionSample]) -> torch.device:
    """The device of the first tensor argument (CPU when there is none)."""
    for sample in samples:
        for t in tensors_of((sample.args, sample.kwargs)):
            return t.device
    return torch.device("cpu")
