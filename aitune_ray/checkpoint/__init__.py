"""Checkpoints: one .ait zip file per tuned object, written atomically and verified by SHA-256 on load.

save_checkpoint(obj, path) stores every wrapped Module of obj: its inner module's weights (safetensors),
the chosen backend's spec, JSON state and artifacts, its signature and tuning device. load_checkpoint(obj,
path, device_map) checks every part, then restores weights and backends into obj. Nothing is pickled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aitune_ray.checkpoint.format import FORMAT_VERSION
from aitune_ray.checkpoint.loader import load_checkpoint
from aitune_ray.checkpoint.writer import save_checkpoint

__all__ = ["FORMAT_VERSION", "load", "load_checkpoint", "save", "save_checkpoint"]


def save(obj: Any, path: str | Path) -> Path:
    """Write one .ait checkpoint holding every wrapped Module of obj. Atomic: a failure keeps an old file."""
    return save_checkpoint(obj, Path(path))


def load(obj: Any, path: str | Path, device_map: dict[str, Any] | None = None) -> Any:
    """Restore the tuned modules of obj from a checkpoint, verifying every part's SHA-256. Returns obj."""
    return load_checkpoint(obj, Path(path), device_map=device_map)
