"""Checkpoints: one .ait zip file per tuned object, written atomically and verified by SHA-256 on load.

save_checkpoint(obj, path) stores every wrapped Module of obj: its inner module's weights (safetensors),
the chosen backend's spec, JSON state and artifacts, its signature and tuning device. load_checkpoint(obj,
path, device_map) checks every part, then restores weights and backends into obj. Nothing is pickled, and
nothing a checkpoint names is imported: its classes must be known (aitune_ray/registry.py).
"""

from aitune_ray.checkpoint.format import FORMAT_VERSION
from aitune_ray.checkpoint.loader import load_checkpoint
from aitune_ray.checkpoint.writer import save_checkpoint

__all__ = ["FORMAT_VERSION", "load_checkpoint", "save_checkpoint"]
