"""Which nn.Modules the JIT mode tracks, and what this thread is doing with them.

tracked maps id(module) to its PatchedModule; the patched nn.Module.__call__ looks calls up here. Per thread:
inside holds the modules whose own call is running (their inner call runs as written), stack the tracked
modules being called (a module first called below one is its child), bypass is set on a tuner's thread (every
call there runs as written).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

tracked: dict[int, Any] = {}
modules: list = []       # every PatchedModule, in the order the modules were made
heads: list = []         # the top modules, in the order of their first calls
history: list[str] = []  # what happened, in order (PatchedModule.history)
_local = threading.local()


def inside() -> set[int]:
    found = getattr(_local, "inside", None)
    if found is None:
        found = _local.inside = set()
    return found


def stack() -> list:
    found = getattr(_local, "stack", None)
    if found is None:
        found = _local.stack = []
    return found


def bypassed() -> bool:
    return getattr(_local, "bypass", False)


@contextlib.contextmanager
def bypass() -> Iterator[None]:
    """Every module call on this thread runs as written (a tuner's thread: builds, timings, checks)."""
    before = bypassed()
    _local.bypass = True
    try:
        yield
    finally:
        _local.bypass = before


def untrack(patched: Any) -> None:
    tracked.pop(id(patched.__wrapped__), None)


def note(entry: str) -> None:
    history.append(entry)


def clear() -> None:
    tracked.clear()
    modules.clear()
    heads.clear()
    history.clear()
