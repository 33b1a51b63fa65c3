"""Find the nn.Modules reachable from a pipeline object, and time each one's calls.

The search starts at the object and follows, up to max_depth steps: a module's children and its other own
attributes, a list's items, a dict's values and a plain object's attributes (vars()). Values of Python's
built-in types other than lists and dicts, tensors, and names starting with "__" are not followed; each
object is visited once, so a module held in two places is found at the first. Every module found has its
forward replaced by one that counts the call and times it between two CUDA synchronizes on the clock given;
restore() puts every forward back.

The modules reported are those called at depth min_depth or more whose holders on the search's path were not
called: the outermost modules that ran.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

import torch

from aitune_ray.inspecting.module_info import (DictOfModulesInfo, ListOfModulesInfo, ModuleInfo,
                                                ObjectOfModulesInfo, input_types, output_types)

logger = logging.getLogger(__name__)

_NO_OWN_FORWARD = object()


@functools.cache
def _module_base_names() -> frozenset[str]:
    """What every nn.Module has (its bookkeeping and methods): not followed on a module."""
    return frozenset(dir(torch.nn.Module()))


def synchronize() -> None:
    """Wait for the work queued on every CUDA device this process has used."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index in range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)


class ModuleFinder:
    def __init__(self, min_depth: int, max_depth: int, clock: Callable[[], float]):
        self.min_depth, self.max_depth, self.clock = min_depth, max_depth, clock
        self.found: dict[int, ModuleInfo] = {}           # id(module) -> its info, in the order found
        self._patched: list[tuple[torch.nn.Module, Any]] = []
        self._seen: set[int] = set()

    # ----- the search -------------------------------------------------------------------------
    def find(self, obj: Any) -> None:
        self._visit(obj, "", 0, None)

    def _visit(self, obj: Any, path: str, depth: int, parent: ModuleInfo | None) -> None:
        if depth > self.max_depth or isinstance(obj, torch.Tensor):
            return
        if type(obj).__module__ == "builtins" and not isinstance(obj, list | dict):
            return
        if id(obj) in self._seen:
            return
        self._seen.add(id(obj))
        where = dict(name=path.rpartition(".")[2] or obj.__class__.__name__, parent=parent, object_path=path,
                     depth=depth)
        if isinstance(obj, torch.nn.Module):
            info = ModuleInfo(module=obj, **where)
            self._register(obj, info)
            members = dict(obj.named_children())
            for name, value in vars(obj).items():
                if not name.startswith("__") and name not in _module_base_names():
                    members.setdefault(name, value)
        elif isinstance(obj, dict):
            info, members = DictOfModulesInfo(module=obj, **where), {str(k): v for k, v in obj.items()}
        elif isinstance(obj, list):
            info, members = ListOfModulesInfo(module=obj, **where), {str(i): v for i, v in enumerate(obj)}
        elif hasattr(obj, "__dict__"):
            try:
                members = {n: v for n, v in vars(obj).items() if not n.startswith("__")}
            except TypeError:   # a __dict__ that vars() refuses
                return
            info = ObjectOfModulesInfo(module=obj, **where)
        else:
            return
        for name, value in members.items():
            self._visit(value, f"{path}.{name}", depth + 1, info)

    # ----- timing the calls --------------------------------------------------------------------
    def _register(self, module: torch.nn.Module, info: ModuleInfo) -> None:
        self.found[id(module)] = info
        self._patched.append((module, module.__dict__.get("forward", _NO_OWN_FORWARD)))
        original, clock = module.forward, self.clock

        @functools.wraps(original)
        def timed_forward(*args: Any, **kwargs: Any) -> Any:
            info.forward_called = True
            info.execution_count += 1
            info.input_types.append(input_types(args, kwargs))
            synchronize()
            start = clock()
            output = original(*args, **kwargs)
            synchronize()
            info.total_execution_time += clock() - start
            info.output_types.append(output_types(output))
            return output

        module.__dict__["forward"] = timed_forward

    def restore(self) -> None:
        """Every module's own forward back, as it was before find()."""
        for module, own in reversed(self._patched):
            if own is _NO_OWN_FORWARD:
                module.__dict__.pop("forward", None)
            else:
                module.__dict__["forward"] = own
        self._patched.clear()

    def forget_calls(self) -> None:
        """Counts and times back to zero (after the warm-up); which modules ran is kept."""
        for info in self.found.values():
            info.execution_count, info.total_execution_time = 0, 0.0
            info.input_types.clear()
            info.output_types.clear()

    # ----- the result -------------------------------------------------------------------------
    def outermost_called(self) -> list[ModuleInfo]:
        """The modules called at min_depth or deeper whose holders on the search's path were not."""
        def counts(info: ModuleInfo) -> bool:
            return info.forward_called and info.depth >= self.min_depth

        def holder_called(info: ModuleInfo) -> bool:
            holder = info.parent
            while holder is not None:
                if counts(holder):
                    return True
                holder = holder.parent
            return False

        return [info for info in self.found.values() if counts(info) and not holder_called(info)]
