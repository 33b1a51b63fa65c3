"""save_checkpoint: write every wrapped Module of an object into one .ait file, atomically."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import os
import re
import stat
import uuid
import zipfile
from pathlib import Path
from typing import Any

from aitune_ray.checkpoint import format as fmt
from aitune_ray.checkpoint.weights import save_weights
from aitune_ray.runtime import files, tempdirs
from aitune_ray.runtime.device import module_device
from aitune_ray.errors import AITuneRayError, CheckpointError
from aitune_ray.records.imports import short_name
from aitune_ray.api.module import Module, ModuleState, find_modules

logger = logging.getLogger(__name__)

ZIP64_FROM = 1 << 30  # members this large are written with zip64 headers


def tuned_device(module: Module) -> str:
    """The device the module was tuned on: its backend's, else its report's, else its parameters'."""
    if module.backend is not None and module.backend.device is not None:
        return str(module.backend.device)
    if module.report is not None and getattr(module.report, "device", ""):
        return str(module.report.device)
    return str(module_device(module.module))


def describe_module(path: str, module: Module) -> tuple[dict, dict[str, Path]]:
    """The manifest entry of one module (without part hashes) and the artifact files to store."""
    if module.state == ModuleState.RECORDING:
        raise CheckpointError(f"module {path or module.name!r} ({module.name}) is not tuned yet (it is still "
                              "recording inputs): call tune() before saving")
    # A module restored from a checkpoint has no samples; it keeps the signature it was loaded with.
    signature = module.samples.signature() or dict(getattr(module, "checkpoint_signature", {}))
    entry: dict[str, Any] = {"path": path, "name": module.name, "device": tuned_device(module),
                             "signature": signature, "state": {}, "is_jit": None, "failure": module.failure or "",
                             "gpu_kind": module.gpu_kind, "tuned": module.state == ModuleState.TUNED,
                             "verdict": dict(getattr(module.report, "verdict", None) or {})}
    artifacts: dict[str, Path] = {}
    if module.state == ModuleState.TUNED and module.backend is not None:
        backend = module.backend
        try:
            state, artifacts = backend.export()
        except Exception as exc:  # noqa: BLE001 - a backend's export may raise anything
            raise CheckpointError(f"module {path!r}: {backend.name}.export() failed: "
                                  f"{type(exc).__name__}: {exc}") from exc
        try:
            json.dumps(state, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"module {path!r}: {backend.name} exported a state that is not plain JSON: "
                                  f"{exc}") from exc
        entry.update(backend=backend.spec(), state=state, is_jit=bool(backend.is_jit))
        for name, file in artifacts.items():
            fmt.check_artifact_name(name, path)
            if not Path(file).is_file():
                raise CheckpointError(f"module {path!r}: {backend.name} artifact {name!r} is not a file: {file}")
    else:
        entry["backend"] = fmt.EAGER
    return entry, {name: Path(file) for name, file in artifacts.items()}


def write_file_member(archive: zipfile.ZipFile, member: str, source: Path) -> dict:
    """Stream a file into the archive (stored, not compressed), returning its part record."""
    size = source.stat().st_size
    info = zipfile.ZipInfo(member, date_time=datetime.datetime.now().timetuple()[:6])
    info.compress_type = zipfile.ZIP_STORED
    with open(source, "rb") as src, archive.open(info, "w", force_zip64=size >= ZIP64_FROM) as dst:
        digest, written = fmt.copy_hashed(src, dst)
    return {"member": member, "sha256": digest, "size": written}


def write_archive(target, entries: list[dict], modules: list[Module], artifacts: list[dict[str, Path]],
                  scratch: Path, signing_key: bytes | str | None = None) -> None:
    """Write weights, artifacts, then the manifest and its hash into the open file target."""
    with zipfile.ZipFile(target, "w", allowZip64=True) as archive:
        for index, (entry, module, files) in enumerate(zip(entries, modules, artifacts)):
            weights_file = scratch / f"weights-{index}.safetensors"
            save_weights(module.module, entry["path"], weights_file)
            entry["weights"] = write_file_member(archive, fmt.weights_member(index), weights_file)
            weights_file.unlink()
            entry["artifacts"] = {name: write_file_member(archive, fmt.artifact_member(index, name), file)
                                  for name, file in sorted(files.items())}
        manifest = {"format": fmt.FORMAT_NAME, "format_version": fmt.FORMAT_VERSION,
                    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "versions": fmt.package_versions([e["backend"]["type"] for e in entries
                                                      if e["backend"] != fmt.EAGER]),
                    "module_names": [e["path"] for e in entries],
                    "modules": entries}
        data = fmt.dump_manifest(manifest)
        archive.writestr(fmt.MANIFEST, data, compress_type=zipfile.ZIP_DEFLATED)
        archive.writestr(fmt.MANIFEST_HASH, fmt.sha256_bytes(data) + "\n")
        if signing_key is not None:
            archive.writestr(fmt.MANIFEST_SIGNATURE, fmt.signature(signing_key, data) + "\n")


def save_checkpoint(obj: Any, path: Path, signing_key: bytes | str | None = None) -> Path:
    """Write one .ait checkpoint of every wrapped Module of obj to path and return it; signed (HMAC-SHA256 of
    the manifest) when a signing_key is given.

    Atomic: the file is written next to path, fsynced and renamed over it, so a failure keeps whatever was at
    path before and leaves no temporary file. The temporary file (.NAME.HEX.tmp) is locked while it is
    written; one that no save holds is what a killed save left, and the next save of path removes it.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory; give a file path such as {path / 'model.ait'}")
    modules = find_modules(obj)
    described = [describe_module(p, m) for p, m in modules.items()]
    entries = [e for e, _ in described]
    artifacts = [a for _, a in described]
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    temp, fd = path, -1
    try:
        temp, fd = _locked_temp(path)
        with os.fdopen(fd, "wb", closefd=False) as target, \
                tempdirs.folder("save") as scratch:
            write_archive(target, entries, list(modules.values()), artifacts, Path(scratch), signing_key)
            target.flush()
            os.fsync(target.fileno())
        os.replace(temp, path)
    except BaseException as exc:
        if fd >= 0:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        if not isinstance(exc, Exception):
            raise
        what = str(exc) if isinstance(exc, AITuneRayError) else f"{type(exc).__name__}: {exc}"
        raise CheckpointError(f"cannot write checkpoint {path}: {what} "
                              "(any earlier file at that path is unchanged)") from exc
    finally:
        if fd >= 0:
            os.close(fd)   # releases the lock, once the file has its final name
    _sync_directory(path.parent)
    logger.info("saved checkpoint %s (%d module(s): %s; %d bytes)", path, len(entries),
                ", ".join(f"{e['path'] or e['name']}={_backend_label(e)}" for e in entries), path.stat().st_size)
    return path


def _temp_pattern(path: Path) -> re.Pattern:
    return re.compile(rf"\.{re.escape(path.name)}\.[0-9a-f]{{12}}\.tmp")


def _locked_temp(path: Path) -> tuple[Path, int]:
    """A new temporary file beside path, open for writing and locked (flock) for as long as it is open."""
    for _ in range(3):
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        fd = files.create_new(temp)   # O_EXCL | O_NOFOLLOW: never a file, FIFO or symlink already there
        fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.stat(temp)):
                return temp, fd
        os.close(fd)   # another save took it for a stale one before it was locked: take a new name
    raise CheckpointError(f"cannot create a temporary file beside {path}")


def remove_stale_temps(path: Path) -> list[Path]:
    """Remove the temporary files of earlier saves of path that were killed: regular files of this user named
    as this module names its own (.NAME.HEX.tmp) that no save holds locked. A symlink, a FIFO or another
    user's file of that name is left alone (opened without following or blocking). Returns what was removed."""
    pattern, removed = _temp_pattern(path), []
    try:
        siblings = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)]
    except OSError:
        return removed
    for sibling in siblings:
        try:
            fd = os.open(sibling, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue   # gone already, or a symlink: not a file this module wrote
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not os.path.samestat(info, os.lstat(sibling)):
                continue   # replaced since it was opened
            sibling.unlink()
            removed.append(sibling)
        except OSError:
            continue   # a save in progress holds it
        finally:
            os.close(fd)
    if removed:
        logger.info("removed %d temporary file(s) of an earlier save of %s that did not finish: %s", len(removed),
                    path, ", ".join(p.name for p in removed))
    return removed


def _backend_label(entry: dict) -> str:
    backend = entry["backend"]
    return backend if backend == fmt.EAGER else short_name(backend["type"])


def _sync_directory(directory: Path) -> None:
    """Make the rename durable (best effort: not every platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
