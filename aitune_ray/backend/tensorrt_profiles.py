"""TensorRT optimization profiles derived from the recorded input shapes (plain data, no TensorRT needed).

Inputs are named as the ONNX export names them (onnx_export.flat_inputs): ``input_0``, ``input_1``, ...
for the tensor leaves of ``(args, kwargs)`` in order. A profile gives every input a (min, opt, max) shape.

- ``ProfileMode.SINGLE``: one dynamic profile. Per axis, min and max are the smallest and largest size
  recorded; opt is the shape of the most frequent recorded call (the larger batch on a tie).
- ``ProfileMode.SAMPLES_USED``: one static profile (min = opt = max) per recorded input-shape set, in
  order of batch size: one per recorded batch size when only the batch varies.
- a list of ``TensorRTProfile``: used as given, after a check that they name exactly the recorded inputs.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import json
from pathlib import Path
from typing import Any, Iterable, Sequence

from aitune_ray.backend.onnx_export import flat_inputs
from aitune_ray.errors import ConfigError
from aitune_ray.model.samples import SampleStore

Shape = tuple[int, ...]


class ProfileMode(str, enum.Enum):
    SINGLE = "single"
    SAMPLES_USED = "samples_used"


def _shape(value: Any, what: str) -> Shape:
    if not isinstance(value, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                       for d in value):
        raise ConfigError(f"{what} must be a list of integers, not {value!r}")
    return tuple(int(d) for d in value)


def _triple(name: Any, triple: Any) -> tuple[Shape, Shape, Shape]:
    if not isinstance(triple, (list, tuple)) or len(triple) != 3:
        raise ConfigError(f"profile input {name!r} needs [min, opt, max] shapes, not {triple!r}")
    low, opt, high = (_shape(s, f"profile input {name!r} shape") for s in triple)
    if not len(low) == len(opt) == len(high):
        raise ConfigError(f"profile input {name!r}: min, opt and max have different ranks")
    if not all(a <= b <= c for a, b, c in zip(low, opt, high)):
        raise ConfigError(f"profile input {name!r}: needs min <= opt <= max on every axis "
                          f"(min {low}, opt {opt}, max {high})")
    if any(a < 0 for a in low):
        raise ConfigError(f"profile input {name!r}: sizes must not be negative")
    return low, opt, high


@dataclasses.dataclass(frozen=True)
class TensorRTProfile:
    """One optimization profile: input name -> (min, opt, max) shapes. Given whole, or built as AITune
    does: TensorRTProfile().add_input_shape("x", min, opt, max) (chained; the name is the forward
    parameter's, as the exported ONNX model names its input)."""

    shapes: dict[str, tuple[Shape, Shape, Shape]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shapes", {str(name): _triple(name, triple)
                                            for name, triple in dict(self.shapes).items()})

    def add_input_shape(self, path: str, min_shape: Shape, opt_shape: Shape, max_shape: Shape) -> "TensorRTProfile":
        """Add one input's (min, opt, max) shapes; returns the profile, for chaining."""
        if not isinstance(path, str):
            raise ConfigError(f"a TensorRT profile input is named by its forward parameter name (a string); a "
                              f"nested input path such as {path!r} is not supported here")
        self.shapes[path] = _triple(path, (min_shape, opt_shape, max_shape))
        return self

    @property
    def is_static(self) -> bool:
        return all(low == high for low, _, high in self.shapes.values())

    def dynamic_axes(self) -> dict[str, list[int]]:
        """Input name -> the axes whose min and max differ."""
        return {name: [i for i, (a, c) in enumerate(zip(low, high)) if a != c]
                for name, (low, _, high) in self.shapes.items()}

    def admits(self, shapes: dict[str, Shape]) -> bool:
        """Whether every input shape lies within this profile (same inputs, same ranks, in range)."""
        if set(shapes) != set(self.shapes):
            return False
        for name, shape in shapes.items():
            low, _, high = self.shapes[name]
            if len(shape) != len(low) or not all(a <= s <= c for a, s, c in zip(low, shape, high)):
                return False
        return True

    def to_dict(self) -> dict:
        return {name: [list(low), list(opt), list(high)] for name, (low, opt, high) in self.shapes.items()}

    @classmethod
    def from_dict(cls, data: dict) -> "TensorRTProfile":
        if not isinstance(data, dict):
            raise ConfigError(f"a TensorRT profile is a mapping input name -> [min, opt, max], not {data!r}")
        return cls(data)

    @classmethod
    def static(cls, shapes: dict[str, Shape]) -> "TensorRTProfile":
        return cls({name: (shape, shape, shape) for name, shape in shapes.items()})


def recorded_shapes(samples: SampleStore) -> list[dict[str, Shape]]:
    """Per recorded sample: ONNX input name -> shape. Raises when the samples disagree on inputs or ranks."""
    out: list[dict[str, Shape]] = []
    for sample in samples:
        out.append({name: tuple(t.shape) for name, t in flat_inputs(sample.args, sample.kwargs).items()})
    if not out:
        raise ConfigError("TensorRT profiles need at least one recorded sample")
    first = out[0]
    for shapes in out[1:]:
        if set(shapes) != set(first) or any(len(shapes[n]) != len(first[n]) for n in first):
            raise ConfigError("the recorded samples differ in their tensor inputs or ranks "
                              f"({ {n: len(s) for n, s in first.items()} } vs { {n: len(s) for n, s in shapes.items()} }); "
                              "one TensorRT engine needs one input signature")
    return out


def _batch(shapes: dict[str, Shape]) -> int:
    for shape in shapes.values():
        if shape:
            return shape[0]
    return 1


def dynamic_profile(recorded: Sequence[dict[str, Shape]]) -> TensorRTProfile:
    """One profile covering every recorded shape: per-axis min and max, opt from the most frequent call."""
    counts = collections.Counter(tuple(sorted(s.items())) for s in recorded)
    opt = dict(max(counts, key=lambda key: (counts[key], _batch(dict(key)))))
    profile = {}
    for name in recorded[0]:
        sizes = list(zip(*(s[name] for s in recorded)))
        profile[name] = (tuple(min(axis) for axis in sizes), opt[name], tuple(max(axis) for axis in sizes))
    return TensorRTProfile(profile)


def static_profiles(recorded: Sequence[dict[str, Shape]]) -> list[TensorRTProfile]:
    """One static profile per distinct recorded input-shape set, ordered by batch size."""
    distinct: dict[tuple, dict[str, Shape]] = {}
    for shapes in recorded:
        distinct.setdefault(tuple(sorted(shapes.items())), shapes)
    ordered = sorted(distinct.values(), key=lambda s: (_batch(s), tuple(sorted(s.items()))))
    return [TensorRTProfile.static(s) for s in ordered]


def derive_profiles(samples: SampleStore, profiles: Any) -> list[TensorRTProfile]:
    """The optimization profiles for the recorded samples under a TensorRTBackendConfig.profiles value."""
    recorded = recorded_shapes(samples)
    if isinstance(profiles, (list, tuple)):
        names = set(recorded[0])
        for profile in profiles:
            given = set(profile.shapes)
            if given != names:
                raise ConfigError(f"TensorRT profile inputs {sorted(given)} do not match the recorded tensor inputs "
                                  f"{sorted(names)}")
            for shapes in recorded:
                if any(len(shapes[n]) != len(profile.shapes[n][0]) for n in names):
                    raise ConfigError("a given TensorRT profile has a rank that differs from the recorded inputs")
        uncovered = [s for s in recorded if not any(p.admits(s) for p in profiles)]
        if uncovered:
            raise ConfigError(f"no given TensorRT profile admits the recorded input shapes {uncovered[0]}")
        return list(profiles)
    if ProfileMode(profiles) == ProfileMode.SAMPLES_USED:
        return static_profiles(recorded)
    return [dynamic_profile(recorded)]


def dynamic_axes(profiles: Iterable[TensorRTProfile]) -> dict[str, dict[int, str]]:
    """ONNX export dynamic_axes: every axis that some profile lets vary, or whose size differs between
    profiles. Axes with the same sizes in every profile share one symbolic name (inputs sharing a batch)."""
    profiles = list(profiles)
    if not profiles:
        return {}
    names: dict[tuple, str] = {}
    axes: dict[str, dict[int, str]] = {}
    for name in profiles[0].shapes:
        rank = len(profiles[0].shapes[name][0])
        for axis in range(rank):
            ranges = tuple((p.shapes[name][0][axis], p.shapes[name][2][axis]) for p in profiles)
            if all(low == high for low, high in ranges) and len({low for low, _ in ranges}) == 1:
                continue
            symbol = names.setdefault(ranges, f"dim_{len(names)}")
            axes.setdefault(name, {})[axis] = symbol
    return axes


def for_inputs(profiles: Iterable[TensorRTProfile], names: Iterable[str]) -> list[TensorRTProfile]:
    """The profiles restricted to the named inputs (an exported graph may drop inputs it never reads)."""
    names = set(names)
    return [TensorRTProfile({n: s for n, s in p.shapes.items() if n in names}) for p in profiles]


def select_profile(profiles: Sequence[TensorRTProfile], shapes: dict[str, Shape]) -> int:
    """Index of the first profile admitting shapes (0 when there are no profiles)."""
    if not profiles:
        return 0
    for index, profile in enumerate(profiles):
        if profile.admits(shapes):
            return index
    raise ConfigError(f"no TensorRT optimization profile admits input shapes {shapes}; the engine was built for "
                      f"{[p.to_dict() for p in profiles]}")


def save_profiles(profiles: Sequence[TensorRTProfile], path: Path) -> Path:
    Path(path).write_text(json.dumps([p.to_dict() for p in profiles], indent=1, sort_keys=True))
    return Path(path)


def load_profiles(path: Path) -> list[TensorRTProfile]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read TensorRT profiles {Path(path).name}: {exc}") from exc
    if not isinstance(data, list):
        raise ConfigError(f"TensorRT profiles {Path(path).name} must hold a list of profiles")
    return [TensorRTProfile.from_dict(p) for p in data]

