"""What inspect() found: one ModuleInfo per object on the pipeline, and InspectedModulesInfo, its result.

A ModuleInfo stands for an nn.Module the search reached, or for a container on the way to one (a list, a
dict, a plain object): its parent is the container or module that holds it, under its name, so that wrap()
can put a wrapper in the same place. Times are seconds of the clock that inspect() read.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional

from aitune_ray.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class ModuleInfo:
    """An nn.Module found on the pipeline, with its calls in the timed iterations.

    name: its attribute name, list index or dict key (the class name at the root). object_path: where it
    stands from the inspected object, dot-separated, with a leading dot ("" for the object itself).
    depth: how many steps from the inspected object. execution_count and total_execution_time: its calls
    and their time (seconds, between synchronizes) over the timed iterations; input_types and output_types:
    the type names of each call's inputs and outputs."""

    module: Any = dataclasses.field(repr=False)
    name: str = ""
    parent: Optional["ModuleInfo"] = dataclasses.field(default=None, repr=False)
    forward_called: bool = False
    execution_count: int = 0
    total_execution_time: float = 0.0
    input_types: list[dict[str, Any]] = dataclasses.field(default_factory=list, repr=False)
    output_types: list[dict[str, Any]] = dataclasses.field(default_factory=list, repr=False)
    object_path: str | None = None
    depth: int = 0

    @property
    def module_type(self) -> type:
        return type(self.module)

    @property
    def average_execution_time(self) -> float:
        """Seconds per call (0.0 when it was not called)."""
        return self.total_execution_time / self.execution_count if self.execution_count else 0.0

    @property
    def num_layers(self) -> int:
        """Its direct children."""
        return len(list(self.module.named_children()))

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    @property
    def precisions(self) -> set:
        """The dtypes of its layers that have parameters (each read by its first parameter)."""
        found = set()
        for layer in self.module.modules():
            first = next(layer.parameters(), None)
            if first is not None:
                found.add(first.dtype)
        return found

    def child(self, name: str) -> Any:
        """What this holds under name (an attribute)."""
        return getattr(self.module, name)

    def set_wrapped(self, name: str, wrapped: Any) -> None:
        """Put wrapped where this holds name."""
        setattr(self.module, name, wrapped)


class ListOfModulesInfo(ModuleInfo):
    """A list on the way to modules: names are indices."""

    def child(self, name: str) -> Any:
        return self.module[int(name)]

    def set_wrapped(self, name: str, wrapped: Any) -> None:
        self.module[int(name)] = wrapped


class DictOfModulesInfo(ModuleInfo):
    """A dict on the way to modules: names are its keys (as text)."""

    def _key(self, name: str) -> Any:
        if name in self.module:
            return name
        return next((k for k in self.module if str(k) == name), name)

    def child(self, name: str) -> Any:
        return self.module[self._key(name)]

    def set_wrapped(self, name: str, wrapped: Any) -> None:
        self.module[self._key(name)] = wrapped


class ObjectOfModulesInfo(ModuleInfo):
    """A plain object on the way to modules: names are its attributes."""


class InspectedModulesInfo:
    """inspect()'s result: the modules it reports (keyed by object path, in the order found), the total
    time of the timed iterations (seconds) and their number."""

    def __init__(self, total_execution_time: float, number_of_batches: int):
        self._modules: dict[str, ModuleInfo] = {}
        self._total_execution_time = total_execution_time
        self._number_of_batches = number_of_batches

    @property
    def total_execution_time(self) -> float:
        return self._total_execution_time

    @property
    def number_of_batches(self) -> int:
        return self._number_of_batches

    def add_module(self, module: ModuleInfo) -> None:
        if module.object_path in self._modules:
            raise ConfigError(f"module {module.name!r} at {module.object_path!r} is already listed")
        self._modules[module.object_path] = module

    def share(self, module: ModuleInfo) -> float:
        """The module's part of the total time, 0 to 1 (0 when nothing was timed)."""
        total = self._total_execution_time
        return module.total_execution_time / total if total > 0 else 0.0

    def get_modules(self, min_execution_ratio: float | None = None, limit: int | None = None) -> list[ModuleInfo]:
        """The modules, in the order found; with min_execution_ratio (0 to 1: only those taking at least that
        share of the total time) or limit (at most that many), slowest first instead."""
        if min_execution_ratio is not None and not 0 <= min_execution_ratio <= 1:
            raise ConfigError(f"min_execution_ratio: value must be between 0 and 1, got {min_execution_ratio!r}")
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise ConfigError(f"limit must be a non-negative integer or None, got {limit!r}")
        modules = list(self._modules.values())
        if min_execution_ratio is None and limit is None:
            return modules
        modules.sort(key=lambda m: (-m.total_execution_time, m.name or ""))
        if min_execution_ratio is not None:
            modules = [m for m in modules if self.share(m) >= min_execution_ratio]
        return modules if limit is None else modules[:limit]

    def table(self) -> str:
        """The modules as a table: calls, time, share of the total, parameters, layers, precisions; then the
        time spent outside them and the total."""
        rows = [("module", "type", "calls", "total ms", "ms/call", "share", "params", "layers", "precisions")]
        for m in self._modules.values():
            rows.append((m.object_path.lstrip(".") or m.name, m.module_type.__name__, str(m.execution_count),
                         f"{m.total_execution_time * 1e3:.3f}", f"{m.average_execution_time * 1e3:.3f}",
                         f"{self.share(m) * 100:.1f}%", f"{m.num_parameters:,}", str(m.num_layers),
                         ", ".join(sorted(str(p).removeprefix("torch.") for p in m.precisions)) or "-"))
        outside = self._total_execution_time - sum(m.total_execution_time for m in self._modules.values())
        share = outside / self._total_execution_time if self._total_execution_time > 0 else 0.0
        rows.append(("(outside these)", "", "", f"{outside * 1e3:.3f}", "", f"{share * 100:.1f}%", "", "", ""))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) if i < 2 or i == 8 else cell.rjust(w)
                           for i, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
        lines.insert(1, "-" * len(lines[0]))
        lines.append(f"total: {self._total_execution_time * 1e3:.3f} ms over {self._number_of_batches} "
                     f"iterations")
        return "\n".join(lines)

    def describe(self) -> None:
        """Print the table, as AITune's describe() does, and log it (INFO); table() returns it as text."""
        text = self.table()
        logger.info("inspected modules:\n%s", text)
        print(text)   # noqa: T201 - AITune's describe() prints: the one printing call of the library

    def __str__(self) -> str:
        return self.table()

    def __len__(self) -> int:
        return len(self._modules)


def input_types(args: tuple, kwargs: dict) -> dict[str, Any]:
    return {"args": [type(a).__name__ for a in args], "kwargs": {k: type(v).__name__ for k, v in kwargs.items()}}


def output_types(output: Any) -> dict[str, Any]:
    if isinstance(output, tuple | list):
        return {"type": type(output).__name__, "elements": [type(x).__name__ for x in output]}
    return {"type": type(output).__name__}
