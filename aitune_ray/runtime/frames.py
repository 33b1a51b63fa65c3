"""A Python frame of its own for every torch.compile the tuner makes.

Dynamo keeps compiled graphs on the code object of the frame where tracing starts, and at every call it
walks that code object's entries until one's guards pass. A tuner compiles many variants of one module
class in one process (Inductor in several modes, TorchAO's quantized copies, KernelSelector delegates,
the re-measurement of finalists built elsewhere), and with ``torch.compile(module)`` they all land on the
class's ``forward``: a call may check the guards of other variants before its own, and once
``torch._dynamo.config.recompile_limit`` (8) entries exist, a new variant is not compiled at all and runs
eagerly, so its measurement says nothing about the backend. Compiling ``own_frame(module)`` instead keeps
each variant's graphs on a code object nobody else uses.

Each such function also has a globals dict of its own: Dynamo stores every graph it compiles for a frame
under a new name in that frame's globals (``__compiled_fn_<n>_<uuid>``) and never removes it, so with this
module's globals the names of every compile the process ever made piled up in this module. In a dict of
its own they go with the function. (Dynamo keeps each graph alive by other means as well; RELIABILITY.md,
"Driver memory", has what remains and why.)
"""

from __future__ import annotations

import builtins
import itertools
import re
import types
from typing import Any, Callable

_serial = itertools.count()


def own_frame(target: Callable, label: str) -> Callable:
    """A function calling target(*args, **kwargs) through a code object of its own (for torch.compile)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return target(*args, **kwargs)

    name = f"{re.sub(r'[^A-Za-z0-9_]+', '_', label) or 'compiled'}_{next(_serial)}"
    fields = {"co_name": name}
    if hasattr(call.__code__, "co_qualname"):   # Python 3.11+
        fields["co_qualname"] = name
    code = call.__code__.replace(**fields)
    scope = {"__builtins__": builtins, "__name__": __name__}   # where Dynamo puts this function's graphs
    return types.FunctionType(code, scope, name, None, call.__closure__)
