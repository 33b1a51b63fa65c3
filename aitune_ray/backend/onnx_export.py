"""ONNX export of a recorded module, shared by the backends that run an ONNX model (ONNX Runtime, TensorRT).

``export_onnx(module, samples, path)`` exports with the largest recorded sample, marks an axis of an input
dynamic when its size differs between the recorded samples (the batch axis, a sequence length), keeps the
weights of a model over 2 GB in one external data file beside the model (``model.onnx.data``), and checks
what it wrote. A failure raises ``ExportError`` naming the step (``prepare``, ``export``, ``save``,
``check``) and the module.

Calls are bound by name to forward's parameters first (model.calls): keywords in any order mean one call.
The graph takes the tensor leaves of that canonical call, ``input_0, input_1, ...`` (``flat_inputs`` of a
bound call); its non-tensor arguments (floats, bools, ints, None, strings) are constants of the graph, kept
in ``ExportedModel.call``, and ``ExportedModel.call_inputs`` answers None for a call whose non-tensor
arguments differ (the backend runs that call eagerly). The exporter may drop inputs the graph does not read,
so ``ExportedModel.graph_inputs`` lists the ones the graph takes. The graph returns the tensor leaves of the
module's outputs; ``ExportedModel.unflatten`` rebuilds the outputs as the module returns them (a ModelOutput
as that ModelOutput class, a namedtuple, a dict, nested; model.structure).
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
from aitune_ray.backend.flat_call import dynamic_shapes, follows_batch, prepare
from aitune_ray.errors import ExportError
from aitune_ray.model.calls import CallForm, bound_samples
from aitune_ray.model.structure import Structure
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
    """The tensor leaves of one call (bound: model.calls.bind), by graph input name."""
    return {input_name(i): t for i, t in enumerate(tensors_of((args, kwargs)))}


@dataclasses.dataclass
class ExportedModel:
    """An exported ONNX model and what a runtime needs to call it like the module (plain data, but for the
    live classes and forward signature it keeps to rebuild outputs and bind calls)."""

    path: Path
    input_names: list[str]          # every tensor leaf of a call, in order
    graph_inputs: list[str]         # the inputs the graph takes (a subset of input_names, in graph order)
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    output_spec: Any                # model.structure spec of the module's outputs (a pytree treespec string
                                    # in a checkpoint written before calls were bound)
    batch_sizes: list[int]          # recorded batch sizes; the dynamic axes admit each of them
    call: CallForm | None = None    # the exported call's form, its non-tensor values baked in (None: older file)
    outputs: Structure | None = None

    def __post_init__(self):
        if self.outputs is None and not isinstance(self.output_spec, str):
            self.outputs = Structure.from_data(self.output_spec)

    def files(self) -> dict[str, Path]:
        """The model file and, for a model over 2 GB, its external data file: {artifact name: path}."""
        found = {self.path.name: self.path}
        data = self.path.with_name(self.path.name + DATA_SUFFIX)
        if data.exists():
            found[data.name] = data
        return found

    def call_inputs(self, args: tuple, kwargs: dict) -> dict[str, torch.Tensor] | None:
        """A call's tensors by graph input name; None where the call's non-tensor arguments (or its
        structure) differ from the exported call's, which the graph holds as constants."""
        if self.call is None:
            return flat_inputs(args, kwargs)
        leaves = self.call.leaves(args, kwargs)
        return None if leaves is None else {input_name(i): t for i, t in enumerate(leaves)}

    def unflatten(self, leaves: list[Any]) -> Any:
        if self.outputs is None:
            return pytree.tree_unflatten(leaves, pytree.treespec_loads(self.output_spec))
        return self.outputs.rebuild(leaves)

    def to_dict(self) -> dict:
        data = {"input_names": self.input_names, "graph_inputs": self.graph_inputs,
                "output_names": self.output_names, "output_spec": self.output_spec,
                "batch_sizes": self.batch_sizes,
                "dynamic_axes": {n: {str(a): v for a, v in axes.items()} for n, axes in self.dynamic_axes.items()}}
        if self.call is not None:
            data["call"] = self.call.to_data()
        return data

    @classmethod
    def from_dict(cls, data: dict, path: Path, module: nn.Module | None = None) -> "ExportedModel":
        """Read back; module: the live module, whose forward binds calls (without it, calls map by position)."""
        axes = {n: {int(a): v for a, v in ax.items()} for n, ax in data.get("dynamic_axes", {}).items()}
        if isinstance(data["output_spec"], str):
            pytree.treespec_loads(data["output_spec"])  # a spec naming types unknown here fails now, not at a call
        call = CallForm.from_data(data["call"], module) if data.get("call") is not None and module is not None \
            else None
        return cls(Path(path), list(data["input_names"]), list(data["graph_inputs"]), list(data["output_names"]),
                   axes, data["output_spec"], list(data.get("batch_sizes", [])), call)


def varying_axes(leaves_per_sample: list[list[torch.Tensor]], batch_sizes: list[int],
                 name=input_name) -> dict[str, dict[int, str]]:
    """{leaf name: {axis: symbol}} for every axis whose size differs between samples: "batch" for a leading
    axis that follows the batch size, else one symbol per distinct run of sizes (axes that always agree share
    one, as an attention mask's and its input ids' sequence axes do)."""
    if len(leaves_per_sample) < 2:
        return {}
    first = leaves_per_sample[0]
    follows = follows_batch(leaves_per_sample, batch_sizes)
    symbols: dict[tuple, str] = {}
    axes: dict[str, dict[int, str]] = {}
    for i, leaf in enumerate(first):
        if not all(len(leaves) == len(first) and leaves[i].dim() == leaf.dim() for leaves in leaves_per_sample):
            continue
        for axis in range(leaf.dim()):
            sizes = tuple(int(leaves[i].shape[axis]) for leaves in leaves_per_sample)
            if len(set(sizes)) < 2:
                continue
            if axis == 0 and follows[i]:
                symbol = BATCH_AXIS
            else:
                symbol = symbols.setdefault(sizes, f"dim_{len(symbols)}")
            axes.setdefault(name(i), {})[axis] = symbol
    return axes


def batch_axes(samples: SampleStore) -> tuple[dict[str, dict[int, str]], dict[str, dict[int, str]]]:
    """Dynamic axes for inputs and outputs: each axis whose size differs between the (bound) samples."""
    sizes = [s.batch_size for s in samples]
    return (varying_axes([tensors_of((s.args, s.kwargs)) for s in samples], sizes),
            varying_axes([tensors_of(s.outputs) for s in samples], sizes, output_name))


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
    input_axes: the inputs' dynamic axes ({input name: {axis: symbol}}) instead of the varying axes
    (TensorRT passes every axis its optimization profiles let vary)."""
    path = Path(path)
    step = _Step(type(module).__name__)
    with step("prepare"):
        onnx = require("onnx", "onnx", "ONNX export")
        flat = prepare(module, samples)   # the tensors-only wrapper every exporter exports (backend.flat_call)
        leaves, call, out_structure = flat.leaves, flat.call, flat.outputs
        inputs = {input_name(i): t for i, t in enumerate(leaves)}
        in_axes, out_axes = batch_axes(flat.served)
        if input_axes is not None:
            in_axes = {name: dict(axes) for name, axes in input_axes.items() if axes}
        outputs = [output_name(i) for i in range(out_structure.leaf_count)]
        if not outputs:
            raise ValueError("the module returns no tensor")
        path.parent.mkdir(parents=True, exist_ok=True)
    with step("export"), quiet("onnx export"):
        program = _export(flat.module, leaves, inputs, outputs, in_axes, out_axes, path, use_dynamo,
                          opset_version, step.what)
    with step("save"):
        if program is not None:
            program.save(str(path))
        _one_data_file(onnx, path)
    with step("check"):
        graph_inputs = _check(onnx, path, inputs, in_axes)
    exported = ExportedModel(path, list(inputs), graph_inputs, outputs, {**in_axes, **out_axes},
                             out_structure.to_data(), samples.batch_sizes(), call, out_structure)
    logger.info("exported %s to %s (inputs %s, dynamic %s, constants %s)", step.what, path, graph_inputs,
                sorted(in_axes), call.constants())
    return exported


def _export(flat: nn.Module, leaves: list, inputs: dict, outputs: list[str], in_axes: dict, out_axes: dict,
            path: Path, use_dynamo: bool, opset_version: int | None, what: str):
    """Run the exporter: the dynamo one (every dynamic axis Dim.AUTO) when use_dynamo, and the TorchScript one
    where that fails (a model whose dynamic-shape trace torch.export cannot decompose, such as T5's attention
    with a dynamic sequence length) or was asked for. Returns the dynamo ONNXProgram, None for TorchScript."""
    if use_dynamo:
        auto = torch.export.Dim.AUTO
        shapes = dynamic_shapes([{axis: auto for axis in in_axes.get(name, {})} for name in inputs])
        try:
            program = torch.onnx.export(flat, tuple(leaves), None, dynamo=True, verbose=False,
                                        input_names=list(inputs), output_names=outputs,
                                        dynamic_shapes=shapes, opset_version=opset_version)
            noop_squeezes_to_identity(program.model.graph, what)
            return program
        except Exception as exc:  # noqa: BLE001 - any failure of torch.export or of its ONNX translation
            first = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
            logger.warning("ONNX export of %s: the dynamo exporter failed (%s); exporting with the TorchScript "
                           "exporter", what, first)
            try:
                return _export(flat, leaves, inputs, outputs, in_axes, out_axes, path, False, opset_version, what)
            except Exception as second:
                raise RuntimeError(f"the dynamo exporter failed ({first}), and so did the TorchScript exporter "
                                   f"({type(second).__name__}: {second})") from exc
    torch.onnx.export(flat, tuple(leaves), str(path), dynamo=False, verbose=False, input_names=list(inputs),
                      output_names=outputs, dynamic_axes={**in_axes, **out_axes} or None,
                      opset_version=opset_version)
    return None


def noop_squeezes_to_identity(graph, what: str) -> int:
    """PyTorch's squeeze(dim) of an axis whose size is not 1 returns its input unchanged (diffusers' PixArt
    does that); torch.onnx translates it to an ONNX Squeeze, which ONNX's shape inference and ONNX Runtime
    refuse to load ("Dimension of input 1 must be 1 instead of 16"). Each Squeeze of the (onnx_ir) graph whose
    every axis has a static size other than 1 becomes the Identity it is in PyTorch. Returns how many."""
    changed = 0
    for node in list(graph):
        if node.op_type != "Squeeze" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        data, axes = node.inputs
        shape = getattr(data, "shape", None)
        constant = getattr(axes, "const_value", None)
        if shape is None or constant is None or len(shape) == 0:
            continue
        sizes = [shape[int(a) % len(shape)] for a in constant.numpy().reshape(-1)]
        if sizes and all(isinstance(size, int) and size != 1 for size in sizes):
            node.resize_inputs(1)
            node.op_type = "Identity"
            changed += 1
    if changed:
        logger.info("ONNX export of %s: %d squeeze(s) of an axis whose size is not 1 exported as Identity, as "
                    "PyTorch runs them", what, changed)
    return changed


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
