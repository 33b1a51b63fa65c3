"""A checkpoint's artifacts, classified by the backend that opens them, and checked before any runtime does.

Every artifact a third-party loader may execute is code, whatever its bytes and layout:

- an AOTInductor package (``.pt2``): ``aoti_load_package`` loads its shared library, unpickles weights
  marked ``use_pickle`` and its sample inputs, and runs the ``"compiler"`` of a ``*_compile_flags.json``
  through the shell when the package holds C++ source;
- a Torch-TensorRT exported program (``.ep``): ``torch.export.load`` unpickles its TensorRT engines;
- a TensorRT engine plan (``.plan``): compiled GPU kernels, and plugins TensorRT finds by name;
- an ONNX model with ``EPContext`` nodes: an engine (or the path of one) that an execution provider loads.

Code loads only when the caller trusts the file: ``allow_native_code=True``, or a checkpoint verified
against the caller's signing key. What each built-in backend's artifacts are is written once, in
``classify``; an artifact of a format no built-in backend reads as data counts as code. A backend class
of the user's own (registered or passed to load) reads its artifacts with its own code.

ONNX models can ask for code and files from outside: operators of a custom domain, which only a custom-op
library (a shared object) provides, and tensors whose data lie in external files at any path. A model is
refused when a node uses an operator of a domain that is not a standard one, unless it calls one of the
model's own functions by its domain and name (a function of a domain does not admit the domain's other
operators), when it names a library in its metadata, when its external data are not files of the same module's
artifacts, and when a sparse tensor keeps its data outside the model (no exporter here writes one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from aitune_ray.checkpoint import format as fmt
from aitune_ray.errors import CheckpointError

# Operator sets that ONNX and ONNX Runtime implement themselves (no library is loaded for them).
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.training",
                              "com.microsoft", "com.microsoft.nchwc", "com.ms.internal.nhwc"})
LIBRARY_WORDS = ("library", "custom_op", "plugin", ".so", ".dll", ".dylib")
EP_CONTEXT = "EPContext"   # com.microsoft's node holding a compiled engine for an execution provider

# What an artifact is to the code that opens it.
CODE = "code"   # a third-party loader may execute it: trusted files only
ONNX = "onnx"   # an ONNX model: checked here; EPContext nodes make it code
DATA = "data"   # bytes this project's code reads as data (JSON), or that nothing opens
OWN = "own"     # opened by a backend class of the user's own code

TRUST_HINT = ("if you trust this file, load it with allow_native_code=True (or sign your checkpoints: "
              "save(..., signing_key=KEY), load(..., signing_key=KEY))")


def parts_of(backend) -> Iterator:
    """backend and every backend inside it (a KernelSelector's delegate, a BatchDispatch's members)."""
    from aitune_ray.backend import BatchDispatchBackend, KernelSelectorBackend

    yield backend
    if isinstance(backend, KernelSelectorBackend):
        yield from parts_of(backend.delegate)
    elif isinstance(backend, BatchDispatchBackend):
        for key, spec in sorted(backend.config.members.items()):
            yield from parts_of(_member(key, spec))


def _member(key: str, spec) -> "Backend":
    """A BatchDispatchBackend's member, recreated from its spec (known classes only)."""
    from aitune_ray.backend import Backend
    from aitune_ray.errors import AITuneRayError, UnknownClassError

    try:
        return Backend.from_spec(spec)
    except UnknownClassError:
        raise
    except (AITuneRayError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CheckpointError(f"member {fmt.shown(key)} of a BatchDispatchBackend cannot be recreated: "
                              f"{' '.join(str(exc).split())[:200]}") from None


def opener(backend, name: str):
    """(the backend whose loader opens the artifact called name, the name it knows it by), or (None, name)
    where no backend opens it. Follows BatchDispatchBackend's member prefixes and KernelSelector delegates."""
    from aitune_ray.backend import BatchDispatchBackend, KernelSelectorBackend

    if isinstance(backend, KernelSelectorBackend):
        return opener(backend.delegate, name)
    if isinstance(backend, BatchDispatchBackend):
        for index, (key, spec) in enumerate(sorted(backend.config.members.items())):
            if name.startswith(f"m{index}-"):
                return opener(_member(key, spec), name[len(f"m{index}-"):])
        return None, name
    return backend, name


def classify(backend, name: str) -> tuple[str, str]:
    """(kind, what it is) of the artifact called name of backend's checkpoint entry: the one place that says
    which artifacts are code."""
    from aitune_ray.backend import (ONNXRuntimeBackend, TensorRTBackend, TorchInductorAotBackend,
                                    TorchTensorRTAotBackend)
    from aitune_ray.backend.onnx_export import DATA_SUFFIX
    from aitune_ray.backend.tensorrt_backend import PROFILES

    backend, name = opener(backend, name)
    if backend is None or backend.is_jit:
        return DATA, "an artifact no backend opens (a JIT backend is rebuilt from its config)"
    if isinstance(backend, TorchInductorAotBackend):
        return CODE, ("an AOTInductor package (its shared library, pickled weights or sample inputs and "
                      "compile commands run as it loads)")
    if isinstance(backend, TorchTensorRTAotBackend):
        return CODE, "a Torch-TensorRT exported program (torch.export.load unpickles its engines)"
    if isinstance(backend, TensorRTBackend):
        if name == PROFILES:
            return DATA, "TensorRT profiles (JSON)"
        return CODE, "a TensorRT engine plan (compiled kernels, plugins loaded by name)"
    if isinstance(backend, ONNXRuntimeBackend):
        if name.endswith(".onnx"):
            return ONNX, "an ONNX model"
        if name.endswith(DATA_SUFFIX):
            return DATA, "an ONNX model's external data"
        return CODE, "a file of a format ONNX Runtime's backend does not store"
    if type(backend).__module__.split(".")[0] == "aitune_ray":
        return CODE, "a file of a format this backend does not store"
    return OWN, f"read by {type(backend).__name__}'s own code"


def check_artifacts(module: str, backend, artifacts: dict[str, Path], trusted: bool) -> None:
    """Refuse the module's artifacts that need code or files from outside the checkpoint and, unless the file
    is trusted (allow_native_code, or signed), those that are code."""
    for name, path in artifacts.items():
        kind, what = classify(backend, name)
        if kind == ONNX:
            check_onnx_model(module, name, path, set(artifacts), trusted)
        elif kind == CODE and not trusted:
            raise _code(module, name, what)


def _code(module: str, name: str, what: str) -> CheckpointError:
    return CheckpointError(f"module {module!r}: artifact {name!r} is code that runs as it loads ({what}), and a "
                           f"checkpoint must not choose which code runs; {TRUST_HINT}")


def check_onnx_model(module: str, name: str, path: Path, artifact_names: set[str], trusted: bool = False) -> None:
    where = f"module {module!r}: ONNX artifact {name!r}"
    try:
        import onnx
    except ImportError as exc:
        raise CheckpointError(f"{where}: the onnx package is needed to check it (pip install "
                              "'aitune-ray[onnx]')") from exc
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - a damaged protobuf raises several types
        raise CheckpointError(f"{where} is not a readable ONNX model: {type(exc).__name__}") from None
    # A local function is called by its (domain, name): it makes that one operator known, not its domain.
    own = {(function.domain, function.name) for function in model.functions}
    opsets = STANDARD_DOMAINS | {domain for domain, _ in own}
    graphs = [model.graph, *(f for f in model.functions)]
    for opset in model.opset_import:
        if opset.domain not in opsets:
            raise _custom(where, opset.domain)
    for graph in graphs:
        for node in _nodes(graph):
            if node.domain not in STANDARD_DOMAINS and (node.domain, node.op_type) not in own:
                raise _custom(where, node.domain, node.op_type)
            if node.op_type == EP_CONTEXT and not trusted:
                raise _code(module, name, f"an ONNX model with an {EP_CONTEXT} node, an engine that an "
                                          "execution provider loads")
    for prop in model.metadata_props:
        text = f"{prop.key} {prop.value}".lower()
        if any(word in text for word in LIBRARY_WORDS):
            raise CheckpointError(f"{where} names a library in its metadata ({fmt.shown(prop.key)}); a "
                                  "checkpoint never loads libraries, so it is refused")
    for tensor in _external_tensors(model):
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if location not in artifact_names or not fmt.is_plain_member(location):
            raise CheckpointError(f"{where}: tensor {fmt.shown(tensor.name)} keeps its data in "
                                  f"{fmt.shown(location)}, which is not an artifact of this module; refused")
    for sparse in _sparse_tensors(model):
        for part in (sparse.values, sparse.indices):
            if part.data_location == onnx.TensorProto.EXTERNAL:
                raise CheckpointError(f"{where}: sparse tensor {fmt.shown(part.name or sparse.values.name)} keeps "
                                      "its data outside the model, which no exporter of this project writes; refused")


def _custom(where: str, domain: str, op: str = "") -> CheckpointError:
    what = f"operator {fmt.shown(domain + '::' + op)}" if op else f"operator set {fmt.shown(domain)}"
    return CheckpointError(f"{where} uses {what} of a custom domain, which needs a custom-op library; a "
                           "checkpoint never loads one, so it is refused")


def _graphs(graph):
    """graph and every subgraph in it (If, Loop, Scan bodies)."""
    import onnx

    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _graphs(sub)


def _sparse_tensors(model):
    """Every sparse tensor of the model: sparse initializers and sparse attributes (Constant's sparse_value),
    in the main graph, its subgraphs and the model's functions."""
    import onnx

    nodes = [n for f in model.functions for n in f.node]
    for graph in _graphs(model.graph):
        yield from graph.sparse_initializer
        nodes += list(graph.node)
    for node in nodes:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.SPARSE_TENSOR:
                yield attribute.sparse_tensor
            elif attribute.type == onnx.AttributeProto.SPARSE_TENSORS:
                yield from attribute.sparse_tensors


def _nodes(graph):
    """Every node of graph, including those of subgraphs (If, Loop, Scan bodies)."""
    import onnx

    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _nodes(sub)


def _external_tensors(model):
    import onnx

    from onnx.external_data_helper import _get_all_tensors

    for tensor in _get_all_tensors(model):
        if tensor.HasField("data_location") and tensor.data_location == onnx.TensorProto.EXTERNAL:
            yield tensor
