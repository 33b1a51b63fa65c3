"""The .ait checkpoint format: member names, the manifest, and SHA-256 hashing.

A checkpoint is one zip archive:

    manifest.json                         what is inside (see build_manifest), with the SHA-256 of every part
    manifest.sha256                       the SHA-256 of manifest.json, so a changed manifest is detected too
    modules/<i>/weights.safetensors       the inner module's state_dict
    modules/<i>/artifacts/<name>          files a backend exported (model.onnx, model.pt2, ...)

Nothing in it is pickled: JSON, safetensors and the backends' own artifact formats only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import importlib.metadata
import json
import platform
import re
import sys
from typing import IO, Any, ClassVar, Optional, Union

from aitune_ray.errors import (CheckpointError, CheckpointIntegrityError, CheckpointSignatureError,
                               CheckpointVersionError, ConfigError)
from aitune_ray.records.validate import from_data
from aitune_ray.version import __version__

FORMAT_NAME = "aitune-ray-checkpoint"
FORMAT_VERSION = 1

MANIFEST = "manifest.json"
MANIFEST_HASH = "manifest.sha256"
MANIFEST_SIGNATURE = "manifest.hmac"     # only in signed checkpoints: HMAC-SHA256 of manifest.json
EAGER = "eager"

CHUNK = 1 << 20

_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")   # used with fullmatch: "$" would let a final "\n" pass
_SAFE_MEMBER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


# ----- the manifest's schema (checked with aitune_ray.records.validate; keys not declared here are ignored) -----
@dataclasses.dataclass
class PartRecord:
    open_keys: ClassVar[bool] = True
    member: str
    sha256: str
    size: int = dataclasses.field(metadata={"min": 0})


@dataclasses.dataclass
class SignatureRecord:
    open_keys: ClassVar[bool] = True
    args: dict[str, Any] = dataclasses.field(default_factory=dict)
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    outputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    batch_sizes: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ModuleRecord:
    open_keys: ClassVar[bool] = True
    path: str
    name: str
    device: str
    backend: Union[str, dict[str, Any]]
    weights: PartRecord
    artifacts: dict[str, PartRecord]
    state: dict[str, Any]
    signature: SignatureRecord = dataclasses.field(default_factory=dict)
    is_jit: Optional[bool] = None
    failure: str = ""
    gpu_kind: str = ""     # the GPU kind its decision is for ("" when the job named none)
    verdict: dict[str, Any] = dataclasses.field(default_factory=dict)   # the decision's Verdict.to_dict()
    tuned: bool = False    # tuned, eager kept by the decision: loads TUNED (as AITune's eager baseline backend)


@dataclasses.dataclass
class ManifestRecord:
    open_keys: ClassVar[bool] = True
    format: str
    format_version: int
    modules: list[ModuleRecord]
    created: str = ""
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    module_names: list[str] = dataclasses.field(default_factory=list)


def is_plain_member(name: str) -> bool:
    """A member name that is a relative path of plain names: no '..', no absolute path, no backslash."""
    return isinstance(name, str) and len(name) < 512 and bool(_SAFE_MEMBER.fullmatch(name))


def shown(text: Any, limit: int = 80) -> str:
    """A name from a file, quoted and cut short for a message."""
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def weights_member(index: int) -> str:
    return f"modules/{index}/weights.safetensors"


def artifact_member(index: int, name: str) -> str:
    return f"modules/{index}/artifacts/{name}"


def check_artifact_name(name: str, module: str) -> str:
    """Artifact names become file names at load: plain names only, no folders or '..'."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name) or name in (".", ".."):
        raise CheckpointError(f"module {shown(module)}: artifact name {shown(name)} is not a plain file name "
                              "(letters, digits, '_', '.', '+', '-')")
    return name


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def signature(key: bytes | str, manifest: bytes) -> str:
    """HMAC-SHA256 of the manifest under the user's key. The manifest holds every part's SHA-256, so this
    authenticates the whole checkpoint: without the key nobody can make a file that verifies."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, bytes) or not key:
        raise CheckpointError("signing_key must be a non-empty bytes or str")
    return hmac.new(key, manifest, hashlib.sha256).hexdigest()


def verify_signature(key: bytes | str, manifest: bytes, recorded: str | None, where: str) -> None:
    if recorded is None:
        raise CheckpointSignatureError(f"{where} is not signed, but a signing_key was given: it is refused "
                                       "(load without signing_key to accept unsigned checkpoints)")
    if not hmac.compare_digest(signature(key, manifest), recorded):
        raise CheckpointSignatureError(f"{where}: the signature does not match this signing_key: the file was "
                                       "changed, or signed with another key")


def copy_hashed(source: IO[bytes], target: IO[bytes], limit: int | None = None) -> tuple[str, int]:
    """Copy source to target in chunks; return (SHA-256 hex, bytes copied). Never copies more than limit
    bytes: more data than that is a CheckpointIntegrityError."""
    digest = hashlib.sha256()
    size = 0
    while True:
        chunk = source.read(CHUNK if limit is None else min(CHUNK, limit - size + 1))
        if not chunk:
            break
        size += len(chunk)
        if limit is not None and size > limit:
            raise CheckpointIntegrityError(f"a part holds more than the {limit} bytes its manifest declares")
        digest.update(chunk)
        target.write(chunk)
    return digest.hexdigest(), size


def distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        module = __import__(name)
    except Exception:  # noqa: BLE001 - a version lookup must never fail a save
        return None
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def package_versions(backend_types: list[str]) -> dict[str, str]:
    """Versions of python, torch, aitune_ray, safetensors and the optional libraries the backends use."""
    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__, "aitune_ray": __version__,
                "safetensors": distribution_version("safetensors")}
    for backend_type in backend_types:
        for library in backend_libraries(backend_type):
            versions[library] = distribution_version(library)
    return {k: v for k, v in versions.items() if v is not None}


def backend_libraries(backend_type: str) -> tuple[str, ...]:
    """The libraries a backend class declares (Backend.libraries), for a class already imported here
    (a checkpoint is written from live backends; nothing is imported for it)."""
    module_name, _, qualname = backend_type.partition(":")
    obj = sys.modules.get(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    libraries = getattr(obj, "libraries", ())
    return tuple(libraries) if isinstance(libraries, (list, tuple)) else ()


def dump_manifest(manifest: dict) -> bytes:
    return json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False).encode("utf-8")


def parse_manifest(data: bytes, expected_hash: str | None) -> dict:
    """Check the manifest's hash and version, then its shape. expected_hash None: the hash member is missing."""
    if expected_hash is None or sha256_bytes(data) != expected_hash:
        manifest, _ = _try_json(data)
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise _newer(version)
        what = "has no recorded hash" if expected_hash is None else "does not match its recorded SHA-256"
        raise CheckpointIntegrityError(f"part {MANIFEST!r} {what}: the manifest was changed or corrupted")
    manifest, problem = _try_json(data)
    if problem:
        raise CheckpointError(f"{MANIFEST} is not valid JSON: {problem}")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{MANIFEST} is not an aitune-ray checkpoint manifest")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{MANIFEST} has no valid format_version ({version!r})")
    if version > FORMAT_VERSION:
        raise _newer(version)
    _check_shape(manifest)
    return manifest


def _newer(version: int) -> CheckpointVersionError:
    return CheckpointVersionError(f"checkpoint format version {version} is newer than the newest this aitune-ray "
                                  f"reads ({FORMAT_VERSION}): upgrade aitune-ray to load it")


def _try_json(data: bytes) -> tuple[Any, str]:
    """(the parsed JSON, "") or (None, why it is not valid JSON)."""
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constant), ""
    except (UnicodeDecodeError, ValueError) as exc:
        return None, " ".join(str(exc).split())[:200]
    except RecursionError:
        return None, "nested too deeply"


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_shape(manifest: dict) -> None:
    """Every field of the right JSON type (ManifestRecord), then what types alone cannot say."""
    try:
        from_data(ManifestRecord, manifest, MANIFEST)
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from None
    modules = manifest["modules"]
    if not modules:
        raise CheckpointError(f"{MANIFEST} lists no modules")
    paths = [entry["path"] for entry in modules]
    for index, entry in enumerate(modules):
        where = f"{MANIFEST}: modules[{index}]"
        if entry["path"] in paths[:index]:
            raise CheckpointError(f"{MANIFEST} lists module {shown(entry['path'])} twice")
        if not _is_spec(entry["backend"]) and entry["backend"] != EAGER:
            raise CheckpointError(f"{where}.backend: neither {EAGER!r} nor a backend spec "
                                  "({'type': 'package.module:Class', 'config': {...}})")
        if (entry["is_jit"] is None) != (entry["backend"] == EAGER):
            raise CheckpointError(f"{where}.is_jit: expected {'null' if entry['backend'] == EAGER else 'a boolean'}"
                                  f" for backend {shown(entry['backend'] if entry['backend'] == EAGER else 'spec')}")
        for name, part in [("weights", entry["weights"]), *entry["artifacts"].items()]:
            if not _SHA256.fullmatch(part["sha256"]):
                raise CheckpointError(f"{where}: part {shown(name)} has no valid SHA-256 ({shown(part['sha256'])})")
        for name in entry["artifacts"]:
            check_artifact_name(name, entry["path"])
    if manifest.get("module_names") and manifest["module_names"] != paths:
        raise CheckpointError(f"{MANIFEST}: module_names {manifest['module_names']!r} differ from the modules' "
                              "paths")


def _is_spec(spec: Any, depth: int = 0) -> bool:
    """A backend spec: a class path, a config mapping, and a delegate that is a spec too (if any)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str) or ":" not in spec["type"]:
        return False
    if not isinstance(spec.get("config", {}), dict):
        return False
    delegate = spec.get("delegate")
    return delegate is None or (depth < 4 and _is_spec(delegate, depth + 1))
