"""DynamicDim and BatchDim: AITune's named dynamic dimensions, with its validation of their bounds.

They are defined and checked here so that AITune code constructs them as before; Module(dynamic_shapes=...)
is refused at once (see module.py): a backend here accepts the shapes that were recorded, so the range
of a dimension is given by recording calls at its smallest and largest size.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aitune_ray.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class DynamicDim:
    """A named dynamic dimension with inclusive bounds min < max and an optional opt between them."""

    name: str
    min: int
    max: int
    opt: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"a dynamic dimension's name must be a non-empty string, got {self.name!r}")
        for field, value in (("min", self.min), ("max", self.max), ("opt", self.opt)):
            if value is None and field == "opt":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{field} of dynamic dimension {self.name!r} must be a positive integer, "
                                  f"got {value!r}")
        if not self.min < self.max:
            raise ConfigError(f"dynamic dimension {self.name!r} needs min < max, got min={self.min}, max={self.max}")
        if self.opt is not None and not self.min <= self.opt <= self.max:
            raise ConfigError(f"dynamic dimension {self.name!r} needs min <= opt <= max, got min={self.min}, "
                              f"opt={self.opt}, max={self.max}")

    def to_dict(self) -> dict[str, Any]:
        return {"type": type(self).__name__, **dataclasses.asdict(self)}


@dataclasses.dataclass(frozen=True)
class BatchDim(DynamicDim):
    """The dynamic dimension that is the module's batch size."""


def check_dynamic_shapes(dynamic_shapes: Any) -> None:
    """A dict from an input path (a parameter name, or a tuple of names and indices) to a tuple of static
    sizes and dynamic dimensions; dimensions of one name must be defined alike."""
    if not isinstance(dynamic_shapes, dict):
        raise ConfigError(f"dynamic_shapes must be a dict, got {type(dynamic_shapes).__name__}")
    seen: dict[str, DynamicDim] = {}
    for path, shape in dynamic_shapes.items():
        if not isinstance(shape, tuple):
            raise ConfigError(f"the shape of input {path!r} must be a tuple, got {shape!r}")
        for axis, size in enumerate(shape):
            if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
                continue
            if not isinstance(size, DynamicDim):
                raise ConfigError(f"axis {axis} of input {path!r} must be a size or a DynamicDim, got {size!r}")
            if seen.setdefault(size.name, size) != size:
                raise ConfigError(f"dynamic dimension {size.name!r} is defined twice, differently (conflicting "
                                  f"definitions): {seen[size.name]!r} and {size!r}")
