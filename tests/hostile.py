"""Helpers for hostile checkpoints: a module that records its import, archive surgery, and the checks that a
refused load changed nothing, wrote nothing and imported nothing."""

from __future__ import annotations

import hashlib
import json
import stat
import struct
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path

import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.backend import ONNXRuntimeBackend, ONNXRuntimeBackendConfig
from aitune_ray.measure.timing import MeasureConfig

FAST = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=5, max_seconds=0.05)
X = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


def tuned(model: nn.Module, backend, name: str) -> ait.Module:
    strategy = ait.OneBackendStrategy(backend, measure_config=FAST).enable_performance_validation(False)
    wrapped = ait.Module(model, name, strategy=strategy)
    for batch in (1, 3):
        wrapped(torch.randn(batch, 8))
    wrapped.tune(device="cpu", executor=ait.InlineExecutor())
    assert wrapped.backend is not None, wrapped.failure
    return wrapped


def onnx_backend() -> ONNXRuntimeBackend:
    return ONNXRuntimeBackend(ONNXRuntimeBackendConfig(use_dynamo=False))


class Bait:
    """A module file on sys.path whose top level writes a marker file: proof of any import of it."""

    def __init__(self, folder: Path):
        self.name = f"bait_{uuid.uuid4().hex[:10]}"
        self.folder = folder / "bait"
        self.folder.mkdir()
        self.marker = folder / f"{self.name}.imported"
        (self.folder / f"{self.name}.py").write_text(
            f"import pathlib\npathlib.Path({str(self.marker)!r}).write_text('imported')\n"
            "from aitune_ray.backend import TorchEagerBackend as Evil\n")
        sys.path.insert(0, str(self.folder))

    def path(self, cls: str = "Evil") -> str:
        return f"{self.name}:{cls}"

    def imported(self) -> bool:
        return self.marker.exists() or self.name in sys.modules

    def remove(self) -> None:
        if str(self.folder) in sys.path:
            sys.path.remove(str(self.folder))
        sys.modules.pop(self.name, None)


def parts_of(path: Path) -> list[tuple[zipfile.ZipInfo, bytes]]:
    with zipfile.ZipFile(path) as archive:
        return [(info, archive.read(info)) for info in archive.infolist()]


def write_parts(path: Path, parts) -> None:
    """Write (name or ZipInfo, bytes) pairs as a zip, duplicates and odd names included."""
    import warnings

    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as archive:
        warnings.simplefilter("ignore")  # zipfile warns of duplicate names: that is the point
        for info, data in parts:
            archive.writestr(info, data)


def manifest_of(path: Path) -> dict:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("manifest.json"))


def with_manifest(path: Path, manifest_bytes: bytes, target: Path | None = None) -> Path:
    """path's archive with manifest.json replaced and manifest.sha256 recomputed, as an attacker can."""
    parts = []
    for info, data in parts_of(path):
        if info.filename == "manifest.json":
            data = manifest_bytes
        elif info.filename == "manifest.sha256":
            data = (hashlib.sha256(manifest_bytes).hexdigest() + "\n").encode()
        fresh = zipfile.ZipInfo(info.filename)
        fresh.compress_type = info.compress_type    # a deflated part stays deflated
        parts.append((fresh, data))
    target = target or path
    write_parts(target, parts)
    return target


def edit_manifest(path: Path, edit, target: Path | None = None) -> Path:
    manifest = manifest_of(path)
    edit(manifest)
    return with_manifest(path, json.dumps(manifest).encode(), target)


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


class Sandbox:
    """A private temporary folder for loads (tempfile's), to see what a load leaves behind."""

    def __init__(self, folder: Path):
        self.folder = folder / "tmp"
        self.folder.mkdir()
        self._old = tempfile.tempdir
        tempfile.tempdir = str(self.folder)

    def leftovers(self) -> set[str]:
        return files_under(self.folder)

    def close(self) -> None:
        tempfile.tempdir = self._old


def same_state(module: nn.Module, before: dict) -> bool:
    after = module.state_dict()
    return after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in after)


def snapshot(module: nn.Module) -> dict:
    return {k: v.clone() for k, v in module.state_dict().items()}


def new_modules(before: set[str]) -> list[str]:
    return sorted(set(sys.modules) - before)


def set_key(node, key: str, value, where: str | None = None) -> int:
    """Set key to value in every mapping under node (that also holds where, if given); how many were set."""
    count = 0
    if isinstance(node, dict):
        if key in node and (where is None or where in node):
            node[key] = value
            count += 1
        children = node.values()
    else:
        children = node if isinstance(node, list) else []
    for child in children:
        count += set_key(child, key, value, where)
    return count


# ----- hostile archives: name -> (build(path, bait), what the error says) -----------------------------------

def _add_member(name: str, data: bytes = b"escaped"):
    def build(path: Path, bait: Bait) -> None:
        write_parts(path, [(i.filename, d) for i, d in parts_of(path)] + [(name, data)])
    return build


def _duplicate_weights(path: Path, bait: Bait) -> None:
    parts = [(i.filename, d) for i, d in parts_of(path)]
    weights = next(p for p in parts if p[0].endswith("weights.safetensors"))
    write_parts(path, parts + [(weights[0], b"other bytes")])


def _symlink(path: Path, bait: Bait) -> None:
    info = zipfile.ZipInfo("modules/0/artifacts/model.onnx")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    parts = [(i.filename, d) for i, d in parts_of(path) if not i.filename.endswith("model.onnx")]
    write_parts(path, parts + [(info, b"/etc/passwd")])


def _bomb(declare_small: bool):
    def build(path: Path, bait: Bait) -> None:
        bomb = bytes(20 << 20)
        parts = []
        for info, data in parts_of(path):
            if info.filename.endswith("weights.safetensors"):
                small = len(data)
                info = zipfile.ZipInfo(info.filename)
                info.compress_type, data = zipfile.ZIP_DEFLATED, bomb
            parts.append((info, data))
        write_parts(path, parts)
        if declare_small:   # the archive and the manifest say the part is small; its data inflate to 20 MB
            _declare_size(path, "modules/0/weights.safetensors", small)
        else:               # sizes are honest, the part inflates 1000-fold
            def grow(m):
                m["modules"][0]["weights"].update(size=len(bomb), sha256=hashlib.sha256(bomb).hexdigest())
            edit_manifest(path, grow)
    return build


def _declare_size(path: Path, member: str, size: int) -> None:
    """Overwrite member's uncompressed size in its local header and in the central directory."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    struct.pack_into("<I", data, info.header_offset + 22, size)
    name = member.encode()
    central = data.find(b"PK\x01\x02")
    while data[central + 46:central + 46 + len(name)] != name:
        central = data.find(b"PK\x01\x02", central + 4)
    struct.pack_into("<I", data, central + 24, size)
    path.write_bytes(bytes(data))


def _manifest_text(change):
    def build(path: Path, bait: Bait) -> None:
        with_manifest(path, change(json.dumps(manifest_of(path)).encode()))
    return build


def _edit(edit):
    def build(path: Path, bait: Bait) -> None:
        edit_manifest(path, edit)
    return build


def _without_hash(path: Path, bait: Bait) -> None:
    write_parts(path, [(i.filename, d) for i, d in parts_of(path) if i.filename != "manifest.sha256"])


def _artifacts(m: dict) -> dict:
    return m["modules"][0]["artifacts"]


ARCHIVE_CASES = {
    "member_dotdot": (_add_member("../escaped.txt"), "not a plain relative path"),
    "member_nested_dotdot": (_add_member("modules/0/../../escaped.txt"), "not a plain relative path"),
    "member_absolute": (_add_member("/tmp/escaped-aitune.txt"), "not a plain relative path"),
    "member_backslash": (_add_member("..\\escaped.txt"), "not a plain relative path"),
    "member_colliding_by_case": (_add_member("modules/0/artifacts/MODEL.onnx"), "collides"),
    "member_duplicate": (_duplicate_weights, "stored twice"),
    "member_symlink": (_symlink, "symlink"),
    "member_not_listed": (_add_member("modules/0/artifacts/extra.bin"), "not listed in the manifest"),
    "manifest_member_dotdot": (_edit(lambda m: m["modules"][0]["weights"].update(member="../escaped.txt")),
                               "belongs"),
    "manifest_member_absolute": (_edit(lambda m: _artifacts(m)["model.onnx"].update(
        member="/tmp/escaped-aitune.txt")), "belongs"),
    "manifest_members_shared": (_edit(lambda m: _artifacts(m)["model.onnx"].update(
        member=m["modules"][0]["weights"]["member"])), "belongs"),
    "artifact_name_dotdot": (_edit(lambda m: _artifacts(m).update({"../escaped.txt": _artifacts(m)["model.onnx"]})),
                             "not a plain file name"),
    "artifact_name_absolute": (_edit(lambda m: _artifacts(m).update(
        {"/tmp/escaped-aitune.txt": _artifacts(m).pop("model.onnx")})), "not a plain file name"),
    "zip_bomb_declared_small": (_bomb(declare_small=True), None),
    "zip_bomb_inflating": (_bomb(declare_small=False), "zip bomb"),
    "manifest_of_many_mb": (_edit(lambda m: m.update(padding="x" * (6 << 20))), "implausibly large"),
    "manifest_duplicate_key": (_manifest_text(lambda t: t.replace(b'"format":', b'"format": "x", "format":', 1)),
                               "appears twice"),
    "manifest_nan": (_manifest_text(lambda t: t.replace(b'"format_version": 1', b'"format_version": NaN')),
                     "not a JSON number"),
    "manifest_deeply_nested": (_manifest_text(lambda t: b"[" * 200_000 + b"]" * 200_000), "not valid JSON"),
    "manifest_not_utf8": (_manifest_text(lambda t: t + b"\xff\xfe"), "not valid JSON"),
    "manifest_hash_missing": (_without_hash, "no recorded hash"),
    "part_size_disagrees": (_edit(lambda m: m["modules"][0]["weights"].update(size=1)), "declares"),
    "backend_spec_without_type": (_edit(lambda m: m["modules"][0]["backend"].pop("type")), "backend spec"),
    "module_paths_duplicate": (_edit(lambda m: m["modules"].append(m["modules"][0])), "twice"),
}


# ----- wrong JSON types in every field ------------------------------------------------------------------------

WRONG = (None, True, 7, 2.5, "x", [], {})
# Left whole: a sample's structure, and a backend's own state (its restore checks it; whatever it raises
# becomes a CheckpointError).
OPAQUE = (("signature", "args"), ("signature", "kwargs"), ("signature", "outputs"), ("state",))


def _kind(value) -> str:
    return "null" if value is None else "bool" if isinstance(value, bool) else type(value).__name__


def fields_of(node, where=()):
    """(path, value) of every field and list item of a manifest, outside the opaque parts."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        path = (*where, key)
        yield path, value
        if not any(path[-len(o):] == o for o in OPAQUE):
            yield from fields_of(value, path)


def wrong_type_cases(manifest: dict):
    """(field path, manifest with that field of another JSON type) for every field and every other type."""
    for path, value in list(fields_of(manifest)):
        for wrong in WRONG:
            if _kind(wrong) == _kind(value) or (value is None and wrong in (None, True, 7, 2.5)):
                continue   # null fields take one other type, which the schema allows: try the rest
            mutated = json.loads(json.dumps(manifest))
            node = mutated
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = wrong
            yield ".".join(map(str, path)) + f"={wrong!r}", mutated


# ----- ONNX artifacts -----------------------------------------------------------------------------------------

def replace_onnx(path: Path, change) -> None:
    """Rewrite module 0's model.onnx with change(model), fixing its hash and size in the manifest."""
    import onnx

    member = "modules/0/artifacts/model.onnx"
    parts = [(i.filename, d) for i, d in parts_of(path)]
    model = onnx.load_from_string(dict(parts)[member])
    change(model)
    replace_artifact(path, model.SerializeToString())


def replace_artifact(path: Path, data: bytes) -> None:
    """Module 0's model.onnx replaced by data, its hash and size fixed in the manifest."""
    member = "modules/0/artifacts/model.onnx"
    write_parts(path, [(i.filename, data if i.filename == member else d) for i, d in parts_of(path)])

    def fix(m):
        m["modules"][0]["artifacts"]["model.onnx"].update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    edit_manifest(path, fix)


def add_custom_op(model, library: str) -> None:
    """An operator of a custom domain after the output, and metadata naming the library that provides it."""
    from onnx import helper

    output = model.graph.output[0].name
    node = helper.make_node("Evil", [output], [output + "_evil"], domain="ai.custom")
    model.graph.node.append(node)
    model.graph.output[0].name = output + "_evil"
    model.opset_import.append(helper.make_opsetid("ai.custom", 1))
    helper.set_model_props(model, {"custom_op_library": library, "ort_config": json.dumps(
        {"session_options": {"custom_op_library": library}})})


def point_data_outside(model, location: str) -> None:
    from onnx import TensorProto

    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
