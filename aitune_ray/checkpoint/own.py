"""A checkpoint this process wrote itself, loaded back by the same run (the command's checks after save).

A checkpoint's native code (an AOTInductor package, a TensorRT plan) loads only when the user allows it or
the file is signed, because a file from elsewhere may run code as it loads. The file a run has just written
is not from elsewhere, as long as it is still exactly what was written. OwnCheckpoint writes it into a
private temporary folder first (only this user can write there), keeps the SHA-256 of those bytes, and puts
a copy at the output path (beside it, then renamed over it: a kill leaves the old file or the new one). Each
load-back copies the output file into a private folder again, checks the copy's hash against the record,
and loads the copy with native code allowed. A file that changed since is refused (CheckpointIntegrityError)
and nothing of it is loaded; the copy cannot change between the check and the load.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator

from aitune_ray.runtime import files, tempdirs
from aitune_ray.errors import CheckpointError, CheckpointIntegrityError


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with os.fdopen(files.open_regular(path), "rb") as src:
        for block in iter(lambda: src.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class OwnCheckpoint:
    """path: where this run writes its checkpoint. save() writes it and records what was written; load()
    loads it back into obj, trusted only while its bytes are those."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.sha256: str | None = None

    def save(self, obj: Any) -> Path:
        from aitune_ray import checkpoint as ait

        folder = tempdirs.make("own")
        try:
            private = ait.save(obj, folder / self.path.name)
            sha256 = file_sha256(private)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:12]}.tmp")
            try:
                files.copy_regular(private, temp)   # a new file (O_EXCL | O_NOFOLLOW), fsynced
                os.replace(temp, self.path)
            except BaseException as exc:
                temp.unlink(missing_ok=True)
                if isinstance(exc, OSError):
                    raise CheckpointError(f"cannot write checkpoint {self.path}: {exc.strerror or exc} (any "
                                          "earlier file at that path is unchanged)") from exc
                raise
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.sha256 = sha256
        return self.path

    @contextlib.contextmanager
    def load(self, obj: Any) -> Iterator[Any]:
        """obj with the checkpoint loaded into it, for the body of the with-block (the private copy it was
        loaded from lives as long)."""
        from aitune_ray import checkpoint as ait

        if self.sha256 is None:
            raise CheckpointIntegrityError(f"{self.path} was not written by this run; it is not trusted")
        folder = tempdirs.make("own")   # mode 0700: this user's only
        try:
            copy = folder / self.path.name
            try:   # a regular file only: a FIFO or a link to /dev/zero put at the path is refused
                files.copy_regular(self.path, copy)
            except OSError as exc:
                raise CheckpointError(f"cannot read checkpoint {self.path}: {exc.strerror or exc}") from exc
            found = file_sha256(copy)
            if found != self.sha256:
                raise CheckpointIntegrityError(f"{self.path} changed after this run wrote it (SHA-256 {found[:12]}, "
                                               f"written {self.sha256[:12]}); it is not loaded")
            yield ait.load(obj, copy, allow_native_code=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
