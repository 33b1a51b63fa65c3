"""LocalTorchStorage: where save() and load() put a checkpoint, as AITune's storage= names it.

Here a checkpoint is one verified .ait file (safetensors weights and a JSON manifest, never a pickle), so a
storage only places it: ``save(model, "tuned.ait", storage=LocalTorchStorage(base_folder="ckpt"))`` writes
ckpt/tuned.ait. AITune's packing options (compression, its SHA files, folder overwrite and removal) have no
counterpart: every checkpoint here is a single file whose parts are checked by SHA-256 when it loads.
"""

from __future__ import annotations

from pathlib import Path

from aitune_ray.errors import ConfigError

_PACKING = ("compress_checkpoint", "overwrite_checkpoint_on_tune", "remove_checkpoint_after_tune", "sha_type")


class LocalTorchStorage:
    """base_folder: the folder a checkpoint path is taken relative to (AITune's default, "checkpoints")."""

    def __init__(self, base_folder: str | Path = "checkpoints", **packing):
        unknown = sorted(set(packing) - set(_PACKING))
        if unknown:
            raise TypeError(f"LocalTorchStorage got unexpected keyword arguments {unknown}")
        if packing:
            raise ConfigError(f"LocalTorchStorage({', '.join(sorted(packing))}=...) has no counterpart here: a "
                              "checkpoint is always one .ait file checked by SHA-256 on load; leave "
                              f"{'it' if len(packing) == 1 else 'them'} out")
        self.base_folder = Path(base_folder)

    def path(self, path: str | Path) -> Path:
        """The file a checkpoint path names in this storage (absolute paths are kept)."""
        return self.base_folder / Path(path)


def placed(path: str | Path, storage) -> Path:
    if storage is None:
        return Path(path)
    if not isinstance(storage, LocalTorchStorage):
        raise ConfigError(f"storage must be a LocalTorchStorage, got {type(storage).__name__}")
    return storage.path(path)
