"""Checkpoints: one .ait zip file per tuned object, written atomically and verified by SHA-256 on load.

save_checkpoint(obj, path) stores every wrapped Module of obj: its inner module's weights (safetensors),
the chosen backend's spec, JSON state and artifacts, its signature and tuning device. load_checkpoint(obj,
path, device_map) checks every part, then restores weights and backends into obj. Nothing is pickled, and
nothing a checkpoint names is imported: its classes must be known (aitune_ray/records/registry.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aitune_ray.checkpoint.format import FORMAT_VERSION
from aitune_ray.checkpoint.loader import load_checkpoint
from aitune_ray.checkpoint.storage import LocalTorchStorage, placed
from aitune_ray.checkpoint.writer import save_checkpoint

__all__ = ["FORMAT_VERSION", "LocalTorchStorage", "load", "load_checkpoint", "save", "save_checkpoint"]


def save(module: Any, path: str | Path, storage: LocalTorchStorage | None = None, *,
         signing_key: bytes | str | None = None) -> Path:
    """Write one .ait checkpoint holding every wrapped Module of module (a Module, a model or a pipeline; AITune's
    parameter names). Atomic: a failure keeps an old file.
    storage: a LocalTorchStorage whose base_folder path is taken relative to (default: path as given).
    With a signing_key (opt-in) the manifest is signed with HMAC-SHA256."""
    target = placed(path, storage)
    if storage is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
    return save_checkpoint(module, target, signing_key=signing_key)


def load(module: Any, path: str | Path, storage: LocalTorchStorage | None = None,
         device_map: dict[str, Any] | None = None, disable_external_logging: bool = True, *,
         backends: tuple = (), providers: tuple = (), signing_key: bytes | str | None = None,
         allow_native_code: bool = False) -> Any:
    """Restore the tuned modules of module from a checkpoint, verifying every part's SHA-256. Returns module (or,
    for a plain model saved whole, its wrapper). AITune's signature: (module, path, storage, device_map,
    disable_external_logging); a dict as the third argument is taken as device_map.

    The checkpoint may name only known classes: the built-ins, those your code defined or imported, and the
    Backend / KernelProvider classes passed in backends / providers. It never imports what it names.
    With a signing_key, only a checkpoint signed with that key (save(..., signing_key=...)) loads. Artifacts
    whose loader may run code (AOTInductor packages, TensorRT plans, Torch-TensorRT programs, ONNX EPContext
    engines) and config fields that name a program, a library, a file or a folder load only from a checkpoint
    signed with signing_key, or with allow_native_code=True (docs/security.md).
    disable_external_logging: the libraries' own loggers print errors only while loading (as AITune)."""
    from aitune_ray.api.tuning import _quiet_libraries

    if isinstance(storage, dict) and device_map is None:   # load(module, path, device_map): the older order
        storage, device_map = None, storage
    with _quiet_libraries(disable_external_logging):
        return load_checkpoint(module, placed(path, storage), device_map=device_map,
                               allowed=(*backends, *providers), signing_key=signing_key,
                               allow_native_code=allow_native_code)
