"""The call an ahead-of-time graph was made from, checked on every call (model.calls.CallForm).

An exported graph (ONNX, a TensorRT engine, an AOTInductor package, a Torch-TensorRT program) holds the
recorded call's non-tensor arguments as constants. ``BakedCall.run(args, kwargs, graph)`` binds a call by
name, and gives it to graph when its non-tensor arguments equal the baked ones; otherwise the eager module
answers that call, and the first such call logs one warning. A graph never answers a call it was not made for.

A graph exported from backend.flat_call's wrapper (``outputs`` given) takes the call's tensor leaves
positionally and returns its outputs' tensor leaves, which ``outputs`` rebuilds as the module returns them.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from torch import nn

from aitune_ray.model.calls import CallForm
from aitune_ray.model.structure import Structure

logger = logging.getLogger(__name__)


class OffGraph:
    """Runs a call the graph was not made for with the eager module; the first one logs a warning naming
    the values the graph holds."""

    def __init__(self, backend: str, module: nn.Module, form: CallForm | None):
        self.backend, self.module, self.form = backend, module, form
        self.warned = False

    def __call__(self, args: tuple, kwargs: dict) -> Any:
        if not self.warned:
            self.warned = True
            constants = self.form.constants() if self.form is not None else {}
            shown = ", ".join(f"{k}={v!r}" for k, v in constants.items() if v is not None)
            logger.warning("%s: a call whose non-tensor arguments differ from the exported call's (%s) runs "
                           "eagerly; calls with those values run the graph", self.backend, shown or "all None")
        return self.module(*args, **kwargs)


class BakedCall:
    """form: the exported call's (None: a checkpoint written before calls were bound; calls pass as given).
    outputs: the structure of the module's outputs, for a graph of backend.flat_call's wrapper (tensor leaves
    in, tensor leaves out). Without it (a checkpoint written before that wrapper), the graph takes the call
    bound by name; as_recorded (a graph exported from the call as the user made it): the call's own positional
    count and keyword names, keywords in the recorded order."""

    def __init__(self, backend: str, module: nn.Module, form: CallForm | None,
                 as_recorded: tuple[int, list[str]] | None = None, outputs: Structure | None = None):
        self.form, self.as_recorded, self.outputs = form, as_recorded, outputs
        self.off_graph = OffGraph(backend, module, form)

    def run(self, args: tuple, kwargs: dict, graph: Callable[..., Any]) -> Any:
        if self.form is None:
            return graph(*args, **kwargs)
        leaves = self.form.leaves(args, kwargs)
        if leaves is None:
            return self.off_graph(args, kwargs)
        if self.outputs is not None:
            return self.outputs.rebuild(list(graph(*leaves)))
        if self.as_recorded is not None:
            count, names = self.as_recorded
            if len(args) != count or set(kwargs) != set(names):
                return self.off_graph(args, kwargs)
            return graph(*args, **{k: kwargs[k] for k in names})
        bound_args, bound_kwargs = self.form.rebuild(leaves)
        return graph(*bound_args, **bound_kwargs)

    def to_data(self) -> dict | None:
        if self.form is None:
            return None
        data = {"form": self.form.to_data()}
        if self.outputs is not None:
            data["outputs"] = self.outputs.to_data()
        if self.as_recorded is not None:
            data["as_recorded"] = [self.as_recorded[0], list(self.as_recorded[1])]
        return data

    @classmethod
    def from_data(cls, backend: str, module: nn.Module, data: Any) -> "BakedCall":
        if not isinstance(data, dict):
            return cls(backend, module, None)
        recorded = data.get("as_recorded")
        outputs = Structure.from_data(data["outputs"]) if data.get("outputs") is not None else None
        return cls(backend, module, CallForm.from_data(data["form"], module),
                   (int(recorded[0]), [str(k) for k in recorded[1]]) if recorded is not None else None, outputs)
