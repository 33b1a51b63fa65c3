"""Moving backend artifacts (model.pt2, model.onnx, ...) from a worker to the driver.

A worker packs each artifact file of a result:
  - as bytes, inside the result, when it is no larger than the inline limit;
  - else, when an artifact directory is configured (a shared path, or an fsspec URL), as a copy there,
    referenced by its path or URL;
  - else it is left for the caller to ship through the object store (``large``).
The driver then writes what it received into its own workdir (``fetch``). No Ray here.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from aitune_ray.errors import BuildError, ConfigError
from aitune_ray.runtime import files


def is_url(location: str) -> bool:
    """True for fsspec URLs such as s3://bucket/dir; plain paths and file:// are local."""
    return "://" in location and not location.startswith("file://")


def local_path(location: str) -> Path:
    return Path(location[len("file://"):] if location.startswith("file://") else location)


def check_artifact_dir(location: str | None) -> None:
    """Raise ConfigError when artifact_dir is a URL but fsspec is not installed."""
    if location and is_url(location):
        try:
            import fsspec  # noqa: F401
        except ImportError as exc:
            raise ConfigError(f"artifact_dir {location!r} is a URL; reading it needs fsspec "
                              "(pip install fsspec, plus the protocol's package)") from exc


def safe_name(name: str) -> str:
    """An artifact name is a relative file name inside a directory; refuse anything that climbs out."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        raise BuildError(f"artifact name {name!r} is not a plain relative file name")
    return name


def plain_part(name: str) -> str:
    """A name (a module's, a model's, a GPU kind) as one plain path component: letters, digits, '_', '.', '-',
    never '.', '..' or a hidden name; a name that had to change gets a short hash of itself, so two names never
    share one folder. The one rule wherever such a name becomes part of a path."""
    plain = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip(".") or "_"
    if plain != name:
        plain += "-" + hashlib.sha256(str(name).encode()).hexdigest()[:8]
    return plain


def write_atomic(path: Path, data: bytes) -> Path:
    """Write data to path through a new temporary file in the same directory, then rename (runtime/files.py:
    a symlink at path is replaced, never followed); the folder is made first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return files.write_atomic(path, data)


def _copy_to(source: Path, location: str) -> str:
    """Copy a file to a path or URL, atomically where the target is local. Returns the location."""
    if is_url(location):
        import fsspec

        with fsspec.open(location, "wb") as out, open(source, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
        return location
    target = local_path(location)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.part")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)
    return str(target)


def pack(artifacts: dict[str, Any], *, limit_bytes: int, artifact_dir: str | None,
         prefix: str) -> tuple[dict[str, Any], dict[str, Path]]:
    """Worker side: ({name: bytes or path/URL}, {name: file too large for both, to ship otherwise})."""
    packed: dict[str, Any] = {}
    large: dict[str, Path] = {}
    for name, value in artifacts.items():
        safe_name(name)
        path = Path(value)
        if not path.is_file():
            raise BuildError(f"artifact {name} is not a file: {path}")
        size = path.stat().st_size
        if size <= limit_bytes:
            packed[name] = path.read_bytes()
        elif artifact_dir:
            packed[name] = _copy_to(path, f"{artifact_dir.rstrip('/')}/{prefix}/{name}")
        else:
            large[name] = path
    return packed, large


def store(artifacts: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Driver side, when a result arrives: bytes become files under directory; paths and URLs stay."""
    stored: dict[str, Any] = {}
    for name, value in artifacts.items():
        if isinstance(value, (bytes, bytearray, memoryview)):
            stored[name] = str(write_atomic(Path(directory) / safe_name(name), bytes(value)))
        else:
            stored[name] = value
    return stored


def fetch(artifacts: dict[str, Any], directory: Path) -> dict[str, Path]:
    """Driver side, to restore a backend: every artifact as a local file (URLs are downloaded)."""
    files: dict[str, Path] = {}
    for name, value in artifacts.items():
        target = Path(directory) / safe_name(name)
        if isinstance(value, (bytes, bytearray, memoryview)):
            files[name] = write_atomic(target, bytes(value))
        elif is_url(str(value)):
            import fsspec

            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.part")
            with fsspec.open(str(value), "rb") as src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            os.replace(tmp, target)
            files[name] = target
        else:
            path = local_path(str(value))
            if not path.is_file():
                raise BuildError(f"artifact {name} is not readable here: {path} (was it written on another "
                                 "node? set artifact_dir to a shared directory or URL)")
            files[name] = path
    return files
