"""ONNX export of a recorded module, shared by the backends that run an ONNX model (ONNX Runtime, TensorRT).

``export_onnx(module, samples, path)`` exports with the largest recorded sample, marks the leading axis of
an input (and output) dynamic when it follows the batch size in every recorded sample and more than one
batch size was recorded, keeps the weights of a model over 2 GB in one external data file beside the model
(``model.onnx.data``), and checks what it wrote. A failure raises ``ExportError`` naming the step
(``prepare``, ``export``, ``save``, ``check``) and the module.

Call inputs map to graph inputs by position: the tensor leaves of ``(args, kwargs)`` in order are
``input_0, input_1, ...`` (``flat_inputs``); the exporter may drop inputs the graph does not read, so
``ExportedModel.graph_inputs`` lists the ones the graph takes.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import nn

from aitune_ray.backend.backend import require
from aitune_ray.errors import ExportError
from aitune_ray.runtime.quiet import quiet
from aitune_ray.model.samples import SampleStore, tensors_of

logger = logging.getLogger(__name__)

BATCH_AXIS = "batch"
DATA_SUFFIX = ".data"
STEPS = ("prepare", "export", "save", "check")


def input_name(index: int) -> str:
    return f"input_{index}"


def output_name(index: int) -> str:
    return f"output_{index}"


def flat_inputs(args: tuple, kwargs: dict) -> dict[str, torch.Tensor]:
    """The tensor leaves of one call, by graph input name."""
    return {input_name(i): t for i, t in enumerate(tensors_of((args, kwargs)))}


@dataclasses.dataclass
class ExportedModel:
    """An exported ONNX model and what a runtime needs to call it like the module (plain data)."""

    path: Path
    input_names: list[str]          # every tensor leaf of a call, in order
    graph_inputs: list[str]         # the inputs the graph takes (a subset of input_names, in graph order)
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    output_spec: str                # pytree treespec of the module's outputs (treespec_dumps)
    batch_sizes: list[int]          # recorded batch sizes; the dynamic axes admit each of them

    def files(self) -> dict[str, Path]:
        """The model file and, for a model over 2 GB, its external data file: {artifact name: path}."""
        found = {self.path.name: self.path}
        data = self.path.with_name(self.path.name + DATA_SUFFIX)
        if data.exists():
            found[data.name] = data
        return found

    def unflatten(self, leaves: list[Any]) -> Any:
        return pytree.tree_unflatten(leaves, pytree.treespec_loads(self.output_spec))

    def to_dict(self) -> dict:
        return {"input_names": self.input_names, "graph_inputs": self.graph_inputs,
                "output_names": self.output_names, "output_spec": self.output_spec,
                "batch_sizes": self.batch_sizes,
                "dynamic_axes": {n: {str(a): v for a, v in axes.items()} for n, axes in self.dynamic_axes.items()}}

    @classmethod
    def from_dict(cls, data: dict, path: Path) -> "ExportedModel":
        axes = {n: {int(a): v for a, v in ax.items()} for n, ax in data.get("dynamic_axes", {}).items()}
        pytree.treespec_loads(data["output_spec"])  # a spec naming types unknown here fails now, not at a call
        return cls(Path(path), list(data["input_names"]), list(data["graph_inputs"]), list(data["output_names"]),
                   axes, data["output_spec"], list(data.get("batch_sizes", [])))


def _batch_following(leaves_per_sample: list[list[torch.Tensor]], batch_sizes: list[int]) -> list[bool]:
    """For each leaf position: does its leading axis equal the batch size in every sample?"""
    first = leaves_per_sample[0]
    return [all(len(leaves) == len(first) and leaves[i].dim() > 0 and leaves[i].shape[0] == bs
                for leaves, bs in zip(leaves_per_sample, batch_sizes))
            for i in range(len(first))]


def batch_axes(samples: SampleStore) -> tuple[dict[str, dict[int, str]], dict[str, dict[int, str]]]:
    """Dynamic axes for inputs and outputs: axis 0 of each leaf that follows the batch size, when the
    samples hold more than one batch size (one recorded batch size exports static shapes)."""
    if len(samples.batch_sizes()) < 2:
        return {}, {}
    sizes = [s.batch_size for s in samples]
    ins = _batch_following([tensors_of((s.args, s.kwargs)) for s in samples], sizes)
    outs = _batch_following([tensors_of(s.outputs) for s in samples], sizes)
    return ({input_name(i): {0: BATCH_AXIS} for i, dyn in enumerate(ins) if dyn},
            {output_name(i): {0: BATCH_AXIS} for i, dyn in enumerate(outs) if dyn})


class _Step:
    """Names the step that is running, so that a failure says where it happened."""

    def __init__(self, what: str):
        self.what = what
        self.name = STEPS[0]

    def __call__(self, name: str) -> "_Step":
        self.name = name
        return self

    def __enter__(self) -> None:
        logger.debug("ONNX export of %s: %s", self.what, self.name)

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or isinstance(exc, ExportError):
            return False
        raise ExportError(self.name, f"ONNX export of {self.what} failed at step '{self.name}': "
                                     f"{type(exc).__name__}: {exc}") from exc


def export_onnx(module: nn.Module, samples: SampleStore, path: Path | str, *, use_dynamo: bool = True,
                opset_version: int | None = None,
                input_axes: dict[str, dict[int, str]] | None = None) -> ExportedModel:
    """Export module to path (model.onnx) from its recorded samples; see the module docstring.
    input_axes: the inputs' dynamic axes ({input name: {axis: symbol}}) instead of the batch axes
    (TensorRT passes every axis its optimization profiles let vary)."""
    path = Path(path)
    step = _Step(type(module).__name__)
    with step("prepare"):
        onnx = require("onnx", "onnx", "ONNX export")
        if len(samples) == 0:
            raise ValueError("no recorded samples to export with")
        sample = max(samples, key=lambda s: s.batch_size)
        inputs = flat_inputs(sample.args, sample.kwargs)
        out_leaves, out_spec = pytree.tree_flatten(sample.outputs)
        if not inputs:
            raise ValueError("the module takes no tensor input")
        if not all(isinstance(leaf, torch.Tensor) for leaf in out_leaves):
            raise ValueError("every output leaf must be a tensor for an ONNX model")
        in_axes, out_axes = batch_axes(samples)
        if input_axes is not None:
            in_axes = {name: dict(axes) for name, axes in input_axes.items() if axes}
        outputs = [output_name(i) for i in range(len(out_leaves))]
        path.parent.mkdir(parents=True, exist_ok=True)
    with step("export"), quiet("onnx export"):
        program = torch.onnx.export(
            module, tuple(sample.args), None if use_dynamo else str(path), kwargs=dict(sample.kwargs),
            dynamo=use_dynamo, verbose=False, input_names=list(inputs), output_names=outputs,
            dynamic_axes={**in_axes, **out_axes} or None, opset_version=opset_version)
    with step("save"):
        if use_dynamo:
            program.save(str(path))
        _one_data_file(onnx, path)
    with step("check"):
        graph_inputs = _check(onnx, path, inputs, in_axes)
    exported = ExportedModel(path, list(inputs), graph_inputs, outputs, {**in_axes, **out_axes},
                             pytree.treespec_dumps(out_spec), samples.batch_sizes())
    logger.info("exported %s to %s (inputs %s, dynamic %s)", step.what, path, graph_inputs, sorted(in_axes))
    return exported


def _external_locations(model) -> set[str]:
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        tensors += [a.t for a in node.attribute if a.HasField("t")]
    return {ExternalDataInfo(t).location for t in tensors if uses_external_data(t)}


def _one_data_file(onnx, path: Path) -> None:
    """Keep a large model's weights in one file beside it, whatever layout the exporter chose."""
    model = onnx.load(str(path), load_external_data=False)
    locations = _external_locations(model)
    if not locations or locations == {path.name + DATA_SUFFIX}:
        return
    model = onnx.load(str(path))
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + DATA_SUFFIX, size_threshold=0)
    for old in locations:
        (path.parent / old).unlink(missing_ok=True)


def _check(onnx, path: Path, inputs: dict[str, torch.Tensor], in_axes: dict) -> list[str]:
    """The model is valid ONNX, its inputs are call inputs, and each has the shape its sample had (its
    dynamic axes symbolic). Returns the graph's input names."""
    onnx.checker.check_model(str(path))        # a path, so that models over 2 GB are checked too
    graph = onnx.load(str(path), load_external_data=False).graph
    names = []
    for value in graph.input:
        if value.name not in inputs:
            raise ValueError(f"graph input {value.name!r} is not one of the call's inputs {list(inputs)}")
        dims = value.type.tensor_type.shape.dim
        want: list = list(inputs[value.name].shape)
        got = [d.dim_value if d.HasField("dim_value") else None for d in dims]
        for axis in in_axes.get(value.name, {}):
            want[axis] = None
        if got != want:
            raise ValueError(f"graph input {value.name!r} has shape {got}, expected {want} "
                             "(None: a dynamic axis)")
        names.append(value.name)
    return names
