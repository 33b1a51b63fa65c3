"""A checkpoint's artifacts, checked before any runtime opens them.

Compiled native code: an artifact that is, or holds (as an AOTInductor package holds its shared library),
machine code runs that code when it loads. It is refused unless the caller trusts the file: the checkpoint
verified against the caller's signing key, or allow_native_code=True.

ONNX models can ask for code and files from outside: operators of a custom domain, which only a custom-op
library (a shared object) provides, and tensors whose data lie in external files at any path. A model is
refused when a node uses a domain that is neither a standard one nor defined by the model's own functions,
when it names a library in its metadata, or when its external data are not files of the same module's
artifacts.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from aitune_ray.checkpoint import format as fmt
from aitune_ray.errors import CheckpointError

# Operator sets that ONNX and ONNX Runtime implement themselves (no library is loaded for them).
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.training",
                              "com.microsoft", "com.microsoft.nchwc", "com.ms.internal.nhwc"})
LIBRARY_WORDS = ("library", "custom_op", "plugin", ".so", ".dll", ".dylib")


# The first bytes of ELF (Linux; CUDA cubins too), Mach-O (32, 64 bit, universal) and PE (Windows) files.
NATIVE_MAGIC = (b"\x7fELF", b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
                b"\xca\xfe\xba\xbe", b"MZ\x90\x00")
NATIVE_SUFFIXES = (".so", ".dll", ".dylib", ".pyd")
# Artifacts that run code as they load whatever their bytes: a TensorRT engine plan (compiled GPU kernels,
# plugins by name) and a Torch-TensorRT exported program (torch.export.load unpickles its engines).
RUNS_AS_IT_LOADS = (".plan", ".ep")


def check_artifacts(module: str, artifacts: dict[str, Path], allow_native_code: bool) -> None:
    """Refuse the module's artifacts that need code or files from outside the checkpoint, and (unless
    allowed) those holding compiled native code."""
    for name, path in artifacts.items():
        if not allow_native_code:
            found = name if name.endswith(RUNS_AS_IT_LOADS) else native_code_in(path)
            if found is not None:
                raise CheckpointError(
                    f"module {module!r}: artifact {name!r} holds compiled native code ({fmt.shown(found)}), which "
                    "would run as it loads, and a checkpoint must not choose which code runs; if you trust this "
                    "file, load it with allow_native_code=True (or sign your checkpoints: save(..., "
                    "signing_key=KEY), load(..., signing_key=KEY))")
        if name.endswith(".onnx"):
            check_onnx_model(module, name, path, set(artifacts))


def native_code_in(path: Path) -> str | None:
    """The name of the machine code in the file at path (the file itself, or a member of a zip such as an
    AOTInductor package), or None."""
    with open(path, "rb") as file:
        if file.read(4).startswith(NATIVE_MAGIC):
            return path.name
    if not zipfile.is_zipfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename.lower()
                if name.endswith(NATIVE_SUFFIXES) or ".so." in name.rpartition("/")[2]:
                    return info.filename
                if not info.is_dir() and info.file_size >= 4:
                    with archive.open(info) as member:
                        if member.read(4).startswith(NATIVE_MAGIC):
                            return info.filename
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError):
        return path.name + " (an unreadable archive)"
    return None


def check_onnx_model(module: str, name: str, path: Path, artifact_names: set[str]) -> None:
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
    own = {function.domain for function in model.functions}
    allowed = STANDARD_DOMAINS | own
    graphs = [model.graph, *(f for f in model.functions)]
    for opset in model.opset_import:
        if opset.domain not in allowed:
            raise _custom(where, opset.domain)
    for graph in graphs:
        for node in _nodes(graph):
            if node.domain not in allowed:
                raise _custom(where, node.domain, node.op_type)
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


def _custom(where: str, domain: str, op: str = "") -> CheckpointError:
    what = f"operator {fmt.shown(domain + '::' + op)}" if op else f"operator set {fmt.shown(domain)}"
    return CheckpointError(f"{where} uses {what} of a custom domain, which needs a custom-op library; a "
                           "checkpoint never loads one, so it is refused")


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
