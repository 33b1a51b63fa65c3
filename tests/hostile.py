"""Helpers for hostile checkpoints: a module that records its import, archive surgery, and the checks that a
refused load changed nothing, wrote nothing and imported nothing."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import struct
import sys
import tempfile
import uuid
import zlib
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
    """Every file and folder under folder, relative to it. Folders that vanish while this walks (an earlier
    test's load folder, removed when its backend is collected) are passed over, not an error."""
    found = set()
    for root, folders, files in os.walk(folder):
        found.update(str(Path(root, name).relative_to(folder)) for name in folders + files)
    return found


class Sandbox:
    """A private temporary folder for loads (tempfile's), to see what a load leaves behind."""

    def __init__(self, folder: Path):
        self.folder = folder / "tmp"
        self.folder.mkdir()
        self._old = tempfile.tempdir, os.environ.get("TMPDIR")
        tempfile.tempdir = str(self.folder)
        os.environ["TMPDIR"] = str(self.folder)   # native loaders (AOTInductor's) make their folders there

    def leftovers(self) -> set[str]:
        """What is in the folder, but for this user's private root of temporary folders and its owners' lock
        files (aitune_ray.runtime.tempdirs), which outlive a load by design."""
        from tests.fault_helpers import without_temp_root

        return without_temp_root(files_under(self.folder))

    def close(self) -> None:
        tempfile.tempdir, old = self._old
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old


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
    "member_encrypted": (lambda p, b: p.write_bytes(flag_encrypted(p.read_bytes(), "modules/0/weights.safetensors")),
                         "encrypted"),
    "zip64_naming_two_disks": (lambda p, b: p.write_bytes(naming_two_disks(p.read_bytes())), "names 2 disks"),
    "entries_beyond_a_checkpoint": (lambda p, b: with_many_entries(p, 10_001), "zip entries"),
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


def replace_artifact(path: Path, data: bytes, name: str = "model.onnx") -> None:
    """Module 0's artifact name replaced by data, its hash and size fixed in the manifest."""
    replace_part(path, f"modules/0/artifacts/{name}", data)


def replace_part(path: Path, member: str, data: bytes) -> None:
    """The archive's member replaced by data, and the manifest's record of that part fixed, as an attacker can."""
    write_parts(path, [(i.filename, data if i.filename == member else d) for i, d in parts_of(path)])

    def fix(node):
        if isinstance(node, dict):
            if node.get("member") == member:
                node.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
            for child in node.values():
                fix(child)
        elif isinstance(node, list):
            for child in node:
                fix(child)
    edit_manifest(path, fix)


def part(path: Path, member: str) -> bytes:
    return dict((i.filename, d) for i, d in parts_of(path))[member]


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


def add_local_function_and_custom_op(model, domain: str = "ai.custom") -> None:
    """A local function of domain (unused) and, after the output, an operator of that domain that no function
    defines (only a custom-op library could provide it). No metadata names a library."""
    from onnx import helper

    function = helper.make_function(domain, "Harmless", ["x"], ["y"], [helper.make_node("Identity", ["x"], ["y"])],
                                    [helper.make_opsetid("", 17)])
    model.functions.append(function)
    output = model.graph.output[0].name
    model.graph.node.append(helper.make_node("Evil", [output], [output + "_evil"], domain=domain))
    model.graph.output[0].name = output + "_evil"
    model.opset_import.append(helper.make_opsetid(domain, 1))


def point_data_outside(model, location: str) -> None:
    from onnx import TensorProto

    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location


# ----- code that a checkpoint must not run: AOTInductor packages, configs, weights --------------------------

class _OpensMarker:
    """Unpickling this creates the marker file (pickle calls open(marker, "w")): proof that something unpickled."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def pickled_marker(marker: Path) -> bytes:
    buffer = io.BytesIO()
    torch.save(_OpensMarker(marker), buffer)
    return buffer.getvalue()


def zip_members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def edit_package(path: Path, change, name: str = "model.pt2") -> None:
    """Module 0's AOTInductor package rewritten member by member (change: {member: bytes} -> the same), its
    hash and size fixed in the manifest."""
    replace_artifact(path, zip_bytes(change(zip_members(part(path, f"modules/0/artifacts/{name}")))), name)


def without_binaries(members: dict[str, bytes]) -> dict[str, bytes]:
    """A package without shared objects or any ELF member, so that no byte sniffing finds machine code."""
    return {n: d for n, d in members.items() if not n.endswith(".so") and not d.startswith(b"\x7fELF")}


def _prefix(members: dict[str, bytes]) -> str:
    return next(iter(members)).split("/")[0]


def _exported_program_members(prefix: str) -> dict[str, bytes]:
    """The members torch.export.save writes for a small model: models/, weights, sample inputs."""
    program = torch.export.export(mlp(), (torch.randn(2, 8),))
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return {f"{prefix}/{n.split('/', 1)[1]}": d for n, d in zip_members(buffer.getvalue()).items()}


def package_pickled_weight(members: dict[str, bytes], marker: Path) -> dict[str, bytes]:
    """An exported program beside the kernels, with a weight marked use_pickle: the loader unpickles it."""
    prefix = _prefix(members)
    added = _exported_program_members(prefix)
    config_name = f"{prefix}/data/weights/model_weights_config.json"
    config = json.loads(added[config_name])
    first = next(iter(config["config"]))
    config["config"][first].update(use_pickle=True, path_name="evil")
    added[config_name] = json.dumps(config).encode()
    added[f"{prefix}/data/weights/evil"] = pickled_marker(marker)
    return {**without_binaries(members), **{n: d for n, d in added.items() if n not in members}}


def package_pickled_sample_inputs(members: dict[str, bytes], marker: Path) -> dict[str, bytes]:
    """An exported program whose sample inputs are a pickle: the loader retries it with weights_only=False."""
    prefix = _prefix(members)
    added = _exported_program_members(prefix)
    added[f"{prefix}/data/sample_inputs/model.pt"] = pickled_marker(marker)
    return {**without_binaries(members), **{n: d for n, d in added.items() if n not in members}}


def package_compile_command(members: dict[str, bytes], marker: Path) -> dict[str, bytes]:
    """C++ source without its library, and compile flags whose "compiler" is a command: the loader runs it."""
    flags = {"compiler": f"touch {marker} #", "definitions": [], "include_dirs": [], "cflags": [], "ldflags": [],
             "libraries_dirs": [], "libraries": [], "passthrough_args": [], "aot_mode": True,
             "use_relative_path": False, "compile_only": True}
    out = without_binaries(members)
    for name in [n for n in out if n.endswith(".cpp")]:
        out[name[:-4] + "_compile_flags.json"] = json.dumps(flags).encode()
        out[name[:-4] + "_linker_flags.json"] = json.dumps(flags).encode()
    return out


PACKAGE_ATTACKS = {"pickled weight": package_pickled_weight, "pickled sample inputs": package_pickled_sample_inputs,
                   "compile command": package_compile_command}


def flag_encrypted(data: bytes, member: str | None = None) -> bytes:
    """The zip data with member (default: the first) flagged encrypted in its local and central headers."""
    out = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(member) if member else archive.infolist()[0]
    out[info.header_offset + 6] |= 1
    name = info.filename.encode()
    central = out.find(b"PK\x01\x02")
    while out[central + 46:central + 46 + len(name)] != name:
        central = out.find(b"PK\x01\x02", central + 4)
    out[central + 8] |= 1
    return bytes(out)


def naming_two_disks(data: bytes) -> bytes:
    """The zip data with a zip64 end locator, just before the end record, that names 2 disks."""
    end = data.rfind(b"PK\x05\x06")
    return data[:end] + b"PK\x06\x07" + struct.pack("<IQI", 0, 0, 2) + data[end:]


def backend_spec(path: Path, spec: dict, module: int = 0) -> None:
    """Module's backend spec replaced by spec (a known class, an attacker's config), as a JIT recipe."""
    def change(m):
        m["modules"][module].update(backend=spec, is_jit=True)
    edit_manifest(path, change)


def with_weights_of_dtype(path: Path, dtype: torch.dtype) -> None:
    """Module 0's weights with its first tensor stored in another dtype, hashes fixed."""
    from safetensors.torch import load, save

    member = "modules/0/weights.safetensors"
    tensors = load(part(path, member))
    first = sorted(tensors)[0]
    tensors[first] = tensors[first].to(dtype)
    replace_part(path, member, save(tensors))


def with_many_entries(path: Path, count: int) -> None:
    """The archive with count empty members added."""
    write_parts(path, [(i.filename, d) for i, d in parts_of(path)] + [(f"pad/{n}", b"") for n in range(count)])


# ----- archives written byte by byte (struct), as an attacker writes them -------------------------------------

DOS_DATE = 0x21   # 1980-01-01, 00:00


def _local_header(name: bytes, data: bytes) -> bytes:
    return struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, 0, 0, DOS_DATE, zlib.crc32(data), len(data), len(data),
                       len(name), 0) + name


def _central_entry(name: bytes, data: bytes, offset: int, extra: bytes = b"") -> bytes:
    return struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, 0, 0, DOS_DATE, zlib.crc32(data), len(data),
                       len(data), len(name), len(extra), 0, 0, 0, 0, offset) + name + extra


def chain_data(chain: list[str], payload: bytes) -> dict[str, bytes]:
    """The data of each member of an overlapping chain: the next member's local header and data (the last
    member's: payload)."""
    data, tail = {}, payload
    for name in reversed(chain):
        data[name] = tail
        tail = _local_header(name.encode(), tail) + tail
    return data


def struct_zip(members: list[tuple[bytes | str, bytes]], chain: list[str] = (), payload: bytes = b"",
               offsets: dict[str, int] | None = None) -> bytes:
    """A zip of stored members written with struct. members: (name, data), one after the other (a name may
    hold any byte). chain: members that overlap, written after them (a quoted overlap: each one's data are the
    next one's header and data, chain_data). offsets: a central directory offset to record instead of the real
    one (0xFFFFFFFF: the offset is given in a zip64 extra field instead)."""
    out, central = bytearray(), bytearray()
    for name, data in members:
        name = name.encode() if isinstance(name, str) else name
        offset, extra = len(out), b""
        wanted = (offsets or {}).get(name.decode("utf-8", "replace"))
        if wanted is not None and wanted >= 0xFFFFFFFF:
            offset, extra = 0xFFFFFFFF, struct.pack("<2HQ", 1, 8, wanted)
        elif wanted is not None:
            offset = wanted
        central += _central_entry(name, data, offset, extra)
        out += _local_header(name, data) + data
    at, chained = len(out), chain_data(list(chain), payload)
    for name in chain:
        central += _central_entry(name.encode(), chained[name], at)
        at += 30 + len(name.encode())
    if chain:
        out += _local_header(chain[0].encode(), chained[chain[0]]) + chained[chain[0]]
    count = len(members) + len(chain)
    return bytes(out + central + struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, count, count, len(central),
                                             len(out), 0))


def rebuilt(path: Path, edit_manifest_with=None, rename: dict[str, bytes] | None = None,
            chain: list[str] = (), payload: bytes = b"", offsets: dict[str, int] | None = None) -> None:
    """path's checkpoint written again with struct_zip: the manifest edited (its hash fixed), members renamed to
    raw names, an overlapping chain added, central directory offsets changed."""
    manifest = manifest_of(path)
    if edit_manifest_with is not None:
        edit_manifest_with(manifest)
    text = json.dumps(manifest).encode()
    members = [((rename or {}).get(i.filename, i.filename), d) for i, d in parts_of(path)
               if i.filename not in ("manifest.json", "manifest.sha256")]
    members += [("manifest.json", text), ("manifest.sha256", (hashlib.sha256(text).hexdigest() + "\n").encode())]
    path.write_bytes(struct_zip(members, chain, payload, offsets))


def with_overlapping_parts(path: Path, count: int = 40, payload: bytes = bytes(256 << 10)) -> int:
    """Module 0 given count more artifacts whose bytes overlap (each one's data hold all the later ones), each
    listed in the manifest with its true size and SHA-256, as an attacker lists them. Returns the bytes that
    extracting them all would write."""
    chain = [f"modules/0/artifacts/z{n}" for n in range(count)]
    data = chain_data(chain, payload)

    def add(m):
        for name in chain:
            m["modules"][0]["artifacts"][name.rsplit("/", 1)[1]] = {
                "member": name, "size": len(data[name]), "sha256": hashlib.sha256(data[name]).hexdigest()}
    rebuilt(path, add, chain=chain, payload=payload)
    return sum(len(d) for d in data.values())
