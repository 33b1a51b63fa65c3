"""The .ait checkpoint format: member names, the manifest, and SHA-256 hashing.

A checkpoint is one zip archive:

    manifest.json                         what is inside (see build_manifest), with the SHA-256 of every part
    manifest.sha256                       the SHA-256 of manifest.json, so a changed manifest is detected too
    modules/<i>/weights.safetensors       the inner module's state_dict
    modules/<i>/artifacts/<name>          files a backend exported (model.onnx, model.pt2, ...)

Nothing in it is pickled: JSON, safetensors and the backends' own artifact formats only.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import re
from typing import IO, Any

from aitune_ray.errors import CheckpointError, CheckpointIntegrityError, CheckpointVersionError

FORMAT_NAME = "aitune-ray-checkpoint"
FORMAT_VERSION = 1

MANIFEST = "manifest.json"
MANIFEST_HASH = "manifest.sha256"
EAGER = "eager"

CHUNK = 1 << 20

# Backend module -> optional distributions whose versions are recorded when a module uses that backend.
BACKEND_LIBRARIES = {
    "aitune_ray.backend.onnx_runtime": ("onnxruntime", "onnx"),
    "aitune_ray.backend.torchao_backend": ("torchao",),
    "aitune_ray.backend.tensorrt_backend": ("tensorrt", "nvidia-modelopt"),
    "aitune_ray.backend.torch_tensorrt_jit": ("torch_tensorrt", "tensorrt"),
    "aitune_ray.backend.torch_tensorrt_aot": ("torch_tensorrt", "tensorrt"),
}

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


def weights_member(index: int) -> str:
    return f"modules/{index}/weights.safetensors"


def artifact_member(index: int, name: str) -> str:
    return f"modules/{index}/artifacts/{name}"


def check_artifact_name(name: str, module: str) -> str:
    """Artifact names become file names at load: plain names only, no folders or '..'."""
    if not isinstance(name, str) or not _SAFE_NAME.match(name) or name in (".", ".."):
        raise CheckpointError(f"module {module!r}: artifact name {name!r} is not a plain file name "
                              "(letters, digits, '_', '.', '+', '-')")
    return name


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def copy_hashed(source: IO[bytes], target: IO[bytes]) -> tuple[str, int]:
    """Copy source to target in chunks; return (SHA-256 hex, bytes copied)."""
    digest = hashlib.sha256()
    size = 0
    while True:
        chunk = source.read(CHUNK)
        if not chunk:
            break
        digest.update(chunk)
        target.write(chunk)
        size += len(chunk)
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

    import aitune_ray

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "aitune_ray": getattr(aitune_ray, "__version__", None) or distribution_version("aitune-ray"),
                "safetensors": distribution_version("safetensors")}
    for backend_type in backend_types:
        module_name = backend_type.partition(":")[0]
        for library in BACKEND_LIBRARIES.get(module_name, ()):
            versions[library] = distribution_version(library)
    return {k: v for k, v in versions.items() if v is not None}


def dump_manifest(manifest: dict) -> bytes:
    return json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False).encode("utf-8")


def parse_manifest(data: bytes, expected_hash: str | None) -> dict:
    """Check the manifest's hash and version, then its shape. expected_hash None: the hash member is missing."""
    if expected_hash is None or sha256_bytes(data) != expected_hash:
        manifest = _try_json(data)
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise _newer(version)
        what = "has no recorded hash" if expected_hash is None else "does not match its recorded SHA-256"
        raise CheckpointIntegrityError(f"part {MANIFEST!r} {what}: the manifest was changed or corrupted")
    manifest = _try_json(data)
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


def _try_json(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def _check_shape(manifest: dict) -> None:
    modules = manifest.get("modules")
    if not isinstance(modules, list) or not modules:
        raise CheckpointError(f"{MANIFEST} lists no modules")
    paths = set()
    for entry in modules:
        if not isinstance(entry, dict):
            raise CheckpointError(f"{MANIFEST} has a module entry that is not an object")
        for key, kind in (("path", str), ("name", str), ("device", str), ("weights", dict), ("artifacts", dict),
                          ("state", dict)):
            if not isinstance(entry.get(key), kind):
                raise CheckpointError(f"{MANIFEST}: module {entry.get('path')!r} has no valid {key!r}")
        backend = entry.get("backend")
        if backend != EAGER and not (isinstance(backend, dict) and isinstance(backend.get("type"), str)):
            raise CheckpointError(f"{MANIFEST}: module {entry['path']!r} has no valid backend spec")
        if entry["path"] in paths:
            raise CheckpointError(f"{MANIFEST} lists module {entry['path']!r} twice")
        paths.add(entry["path"])
        for part in [entry["weights"], *entry["artifacts"].values()]:
            if not (isinstance(part, dict) and isinstance(part.get("member"), str)
                    and isinstance(part.get("sha256"), str)):
                raise CheckpointError(f"{MANIFEST}: module {entry['path']!r} has a part without member/sha256")
        for name in entry["artifacts"]:
            check_artifact_name(name, entry["path"])
