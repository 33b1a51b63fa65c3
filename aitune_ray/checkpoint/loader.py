"""load_checkpoint: verify a .ait file completely, then restore weights and backends into the user's modules.

Order: entry count, members, manifest hash and version; module names; devices; backend classes (known classes
only: nothing the file names is imported, nothing is unpickled); backend configs (config_check); every part's
SHA-256 while extracting; the artifacts (artifact_check: code loads only from a trusted file); weight keys,
shapes and dtypes. Only then is anything in the user's object changed. Whatever reading the file raises
reaches the caller as a CheckpointError.
"""

from __future__ import annotations

import logging
import shutil
import weakref
from pathlib import Path
from typing import Any, Iterable

import torch

from aitune_ray.backend.backend import Backend
from aitune_ray.checkpoint import format as fmt
from aitune_ray.checkpoint.artifact_check import check_artifacts
from aitune_ray.checkpoint.config_check import check_configs
from aitune_ray.checkpoint.reader import CheckpointArchive
from aitune_ray.checkpoint.weights import check_matches, read_weights
from aitune_ray.runtime import tempdirs
from aitune_ray.runtime.device import resolve_device
from aitune_ray.errors import (AITuneRayError, CheckpointError, CheckpointMismatchError, ConfigError, DeviceError,
                               UnknownClassError)
from aitune_ray.api.module import Module, find_modules, wrapper_of
from aitune_ray.records.registry import untrusted
from aitune_ray.model.wrapping import plain_module_at, put

logger = logging.getLogger(__name__)


def match_modules(obj: Any, entries: list[dict]) -> dict[str, Module]:
    """Checkpoint path -> the Module of obj at that attribute path."""
    if isinstance(obj, _Attached):
        found, obj = obj.modules(), obj.obj
        if not found:
            raise CheckpointMismatchError(f"the checkpoint holds module(s) {[e['path'] for e in entries]} but "
                                          f"{type(obj).__name__} holds no aitune_ray.Module")
    else:
        try:
            found = find_modules(obj)
        except ConfigError as exc:
            raise CheckpointMismatchError(f"the checkpoint holds module(s) {[e['path'] for e in entries]} but "
                                          f"{exc}") from exc
    missing = [e["path"] for e in entries if e["path"] not in found]
    if missing:
        raise CheckpointMismatchError(f"the checkpoint holds module(s) {missing} that do not exist in "
                                      f"{type(obj).__name__} (its wrapped modules: {sorted(found)}); it was "
                                      "saved from another model or pipeline")
    extra = sorted(set(found) - {e["path"] for e in entries})
    if extra:
        logger.warning("the checkpoint has nothing for module(s) %s; they are left as they are", extra)
    return {e["path"]: found[e["path"]] for e in entries}


def wrap_plain_modules(obj: Any, entries: list[dict]) -> tuple[Any, list[tuple[str, Any, str, Module]]]:
    """AITune's load takes the plain model too: wrap each plain nn.Module that stands where the checkpoint has a
    Module. Returns (the object to match against, [(path, parent, attribute, wrapper)] to attach once loaded)."""
    from torch import nn

    by_path = {e["path"]: e for e in entries}
    if "" in by_path and isinstance(obj, nn.Module) and not isinstance(obj, Module) and wrapper_of(obj) is None:
        return Module(obj, by_path[""]["name"], patch_forward=False), []   # patched once loaded
    attach = []
    for path, entry in by_path.items():
        found = plain_module_at(obj, path, Module) if path else None
        if found is not None and wrapper_of(found[2]) is None:   # a wrapper's original object is found as it
            parent, attr, module = found
            try:   # the module put back where it stands: an attribute that cannot be set fails here, not later
                put(parent, attr, module)
            except Exception as exc:  # noqa: BLE001 - a property without a setter, a tuple, __setattr__ of its own
                raise CheckpointMismatchError(
                    f"the checkpoint's module {path!r} stands where it cannot be replaced ({type(parent).__name__}"
                    f".{attr}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}); wrap it in "
                    "aitune_ray.Module yourself and load into that") from None
            attach.append((path, parent, attr, Module(module, entry["name"], patch_forward=False)))
    return obj, attach


class _Attached:
    """A view of obj in which the planned wrappers already stand at their paths (for matching only)."""

    def __init__(self, obj: Any, attach: list[tuple[str, Any, str, Module]]):
        self.obj, self.attach = obj, attach

    def modules(self) -> dict[str, Module]:
        found = {}
        try:
            found = find_modules(self.obj)
        except ConfigError:
            pass
        found.update({path: wrapper for path, _, _, wrapper in self.attach})
        return found


def resolve_devices(entries: list[dict], targets: dict[str, Module],
                    device_map: dict[str, Any] | None) -> dict[str, torch.device]:
    """The device of each module: device_map (by attribute path, or by a Module's name), else the tuned one."""
    by_key: dict[str, set[str]] = {}
    for entry in entries:
        for key in (entry["path"], entry["name"], targets[entry["path"]].name):
            by_key.setdefault(key, set()).add(entry["path"])
    chosen: dict[str, Any] = {}
    if device_map:
        unknown = sorted(k for k in device_map if k not in by_key)
        if unknown:
            raise ConfigError(f"device_map key(s) {unknown} match no module of the checkpoint; valid names: "
                              f"{sorted(by_key)} (attribute paths, '' for the top module, or Module names)")
        paths = {e["path"] for e in entries}
        # Module names first, then attribute paths, so the more specific key wins.
        for key in sorted(device_map, key=lambda k: k in paths):
            for path in by_key[key]:
                chosen[path] = device_map[key]
    devices = {}
    for entry in entries:
        path = entry["path"]
        if path in chosen:
            devices[path] = resolve_device(chosen[path])
            continue
        try:
            devices[path] = resolve_device(entry["device"])
        except DeviceError as exc:
            raise DeviceError(f"module {path!r} ({entry['name']}) was tuned on {entry['device']}, which this "
                              f"machine cannot use ({exc}); load it onto another device with "
                              f"device_map={{{path!r}: 'cpu'}} (or another device)") from exc
    return devices


def backend_for(entry: dict) -> Backend | None:
    if entry["backend"] == fmt.EAGER:
        return None
    try:
        return Backend.from_spec(entry["backend"])
    except UnknownClassError as exc:
        raise UnknownClassError(f"module {entry['path']!r}: {exc}") from None
    except (AITuneRayError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CheckpointError(f"module {entry['path']!r}: backend {entry['backend'].get('type')!r} cannot be "
                              f"recreated: {exc}") from exc


def load_checkpoint(obj: Any, path: Path, device_map: dict[str, Any] | None = None,
                    allowed: Iterable[type] = (), signing_key: bytes | str | None = None,
                    allow_native_code: bool = False) -> Any:
    """Restore every module saved in the checkpoint at path into obj and return obj.

    obj may also be the plain model (or a pipeline holding plain modules), as with AITune: the modules are
    wrapped once everything has loaded, and for a plain top-level model the wrapper is returned.
    The backend and kernel provider classes the checkpoint names must be registered (built-in, or defined
    or imported by the caller's code) or be among allowed; nothing the file names is imported. With a
    signing_key, only a checkpoint signed with that key loads. Artifacts that are code (artifact_check) and
    config fields that name a program, a library, a file or a folder (config_check) load only from a signed
    checkpoint or with allow_native_code=True."""
    path = Path(path).expanduser()
    with untrusted(allowed):
        return _load(obj, path, device_map, signing_key, allow_native_code)


def _load(obj: Any, path: Path, device_map: dict[str, Any] | None, signing_key: bytes | str | None,
          allow_native_code: bool) -> Any:
    trusted = allow_native_code or signing_key is not None   # a key given: the signature was verified
    workdir = None
    try:
        with CheckpointArchive(path) as archive:
            manifest = archive.manifest(signing_key)
            entries = manifest["modules"]
            obj, attach = wrap_plain_modules(obj, entries)
            targets = match_modules(_Attached(obj, attach) if attach else obj, entries)
            devices = resolve_devices(entries, targets, device_map)
            backends = {e["path"]: backend_for(e) for e in entries}
            for entry in entries:
                if backends[entry["path"]] is not None:
                    check_configs(entry["path"], backends[entry["path"]], trusted)
            workdir = tempdirs.make("load")
            tensors, artifacts = _extract_all(archive, entries, targets, backends, workdir, trusted)
    except BaseException as exc:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        if isinstance(exc, AITuneRayError) or not isinstance(exc, Exception):
            raise
        # the one promise: reading a checkpoint fails with a CheckpointError, whatever a library raised
        raise CheckpointError(f"{path} cannot be read: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}") \
            from exc
    _log_versions(manifest, path)
    try:
        _apply(entries, targets, devices, backends, tensors, artifacts, workdir, attach)
    except BaseException as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        if isinstance(exc, AITuneRayError) or not isinstance(exc, Exception):
            raise
        raise CheckpointError(f"{path} cannot be loaded: {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:300]} (the modules are as they were)") from exc
    _release_when_unused(workdir, [b for b in backends.values() if b is not None])
    logger.info("loaded checkpoint %s: %s", path, ", ".join(
        f"{p or targets[p].name}={'eager' if backends[p] is None else backends[p].name} on {devices[p]}"
        for p in targets))
    return obj


def _extract_all(archive: CheckpointArchive, entries: list[dict], targets: dict[str, Module],
                 backends: dict[str, Backend | None], workdir: Path,
                 trusted: bool) -> tuple[dict[str, dict], dict[str, dict[str, Path]]]:
    """Extract and hash-check every part, then read and check the weights; nothing is applied yet."""
    files: dict[str, tuple[Path, dict[str, Path]]] = {}
    for index, entry in enumerate(entries):
        folder = workdir / str(index)
        (folder / "artifacts").mkdir(parents=True)
        weights = archive.extract(entry["weights"], folder / "weights.safetensors")
        extracted = {name: archive.extract(part, folder / "artifacts" / fmt.check_artifact_name(name, entry["path"]))
                     for name, part in entry["artifacts"].items()}
        if backends[entry["path"]] is not None:
            check_artifacts(entry["path"], backends[entry["path"]], extracted, trusted)
        files[entry["path"]] = (weights, extracted)
    tensors = {}
    for entry in entries:
        where = entry["path"]
        weights_file = files[where][0]
        tensors[where] = read_weights(weights_file, where)
        weights_file.unlink()
        check_matches(targets[where].module, tensors[where], where)
    return tensors, {p: a for p, (_, a) in files.items()}


def _apply(entries, targets, devices, backends, tensors, artifacts, workdir: Path, attach=()) -> None:
    """Load weights, restore each backend, put the wrappers of plain modules in place (attach), and only when
    all are ready switch the modules over. A failure puts the modules' own weights, devices and attributes
    back (the weights kept on the CPU meanwhile)."""
    originals = [(targets[e["path"]].module, _cpu_copy(targets[e["path"]].module)) for e in entries]
    ready: list[Backend] = []
    placed: list[tuple[Any, str, Any]] = []
    try:
        for entry in entries:
            where = entry["path"]
            inner = targets[where].module
            inner.to(devices[where])
            inner.load_state_dict(tensors[where], strict=True)
        for index, entry in enumerate(entries):
            backend = backends[entry["path"]]
            if backend is None:
                continue
            where = entry["path"]
            try:
                with targets[where].unpatched():   # a restore that traces or compiles sees the module as it was
                    backend.restore(targets[where].module, entry["state"], artifacts[where], devices[where],
                                    workdir / str(index) / "restore")
                    backend.deploy()
            except UnknownClassError as exc:
                raise UnknownClassError(f"module {where!r}: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - a backend's restore may raise anything
                raise CheckpointError(f"module {where!r}: {backend.name} could not be restored on "
                                      f"{devices[where]}: {type(exc).__name__}: {exc}") from exc
            ready.append(backend)
        for _, parent, attr, wrapper in attach:
            put(parent, attr, wrapper)
            placed.append((parent, attr, wrapper.module))
    except BaseException:
        for parent, attr, module in reversed(placed):
            put(parent, attr, module)
        for backend in ready:
            backend.deactivate()
        for inner, (device, state) in originals:
            inner.to(device)
            inner.load_state_dict(state, strict=True)
        raise
    for entry in entries:
        module = targets[entry["path"]]
        if backends[entry["path"]] is None and entry.get("tuned") is True:
            module.keep_eager()   # the decision kept eager: TUNED, as it was saved
        else:
            module.use_backend(backends[entry["path"]])
        if module.module.__dict__.get("forward") is not module._proxy:   # noqa: SLF001 - wrapped by this load
            module.patch_forward()
        module.checkpoint_signature = entry.get("signature") or {}  # kept for a later save without samples


def _cpu_copy(module: torch.nn.Module) -> tuple[torch.device, dict[str, torch.Tensor]]:
    """(the module's device, a CPU copy of its state_dict) to put back if the load fails."""
    state = module.state_dict()
    device = next((t.device for t in state.values() if isinstance(t, torch.Tensor)), torch.device("cpu"))
    return device, {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def _release_when_unused(workdir: Path, backends: list[Backend]) -> None:
    """Backends may keep reading their artifacts; the folder goes when the last of them is collected."""
    if not backends:
        shutil.rmtree(workdir, ignore_errors=True)
        return
    holder = _FolderHolder(workdir)
    for backend in backends:
        backend._checkpoint_files = holder  # noqa: SLF001 - keeps the folder alive with the backend


class _FolderHolder:
    def __init__(self, folder: Path):
        self.folder = folder
        weakref.finalize(self, shutil.rmtree, str(folder), True)


def _log_versions(manifest: dict, path: Path) -> None:
    saved = manifest.get("versions") or {}
    here = fmt.package_versions([e["backend"]["type"] for e in manifest["modules"] if e["backend"] != fmt.EAGER])
    differ = {k: (v, here.get(k)) for k, v in saved.items() if k in here and here[k] != v}
    if differ:
        logger.info("checkpoint %s was written with other package versions (saved -> here): %s", path,
                    ", ".join(f"{k} {a} -> {b}" for k, (a, b) in sorted(differ.items())))
