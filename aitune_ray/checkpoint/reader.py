"""Reading a .ait archive: open it, verify the manifest, and extract every part checking its SHA-256."""

from __future__ import annotations

import contextlib
import shutil
import zipfile
from pathlib import Path

from aitune_ray.checkpoint import format as fmt
from aitune_ray.errors import CheckpointError, CheckpointIntegrityError, CheckpointTruncatedError

MAX_MANIFEST_BYTES = 64 << 20


class CheckpointArchive:
    """An open checkpoint archive. Use as a context manager; nothing is extracted until asked."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.exists():
            raise CheckpointError(f"no checkpoint at {self.path}: the file does not exist")
        if self.path.is_dir():
            raise CheckpointError(f"{self.path} is a directory, not a checkpoint file")
        try:
            self._zip = zipfile.ZipFile(self.path, "r")
        except (zipfile.BadZipFile, EOFError, ValueError) as exc:
            raise CheckpointTruncatedError(f"{self.path} is truncated or is not an aitune-ray checkpoint "
                                           f"(not a readable zip archive: {exc})") from exc
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {exc}") from exc
        self._names = set(self._zip.namelist())

    def __enter__(self) -> "CheckpointArchive":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def manifest(self) -> dict:
        """The manifest, after checking it against the stored hash and checking its format version."""
        if fmt.MANIFEST not in self._names:
            raise CheckpointTruncatedError(f"{self.path} has no {fmt.MANIFEST}: it is truncated or is not an "
                                           "aitune-ray checkpoint")
        if self._zip.getinfo(fmt.MANIFEST).file_size > MAX_MANIFEST_BYTES:
            raise CheckpointError(f"{self.path}: {fmt.MANIFEST} is implausibly large")
        data = self._read_small(fmt.MANIFEST)
        expected = None
        if fmt.MANIFEST_HASH in self._names:
            expected = self._read_small(fmt.MANIFEST_HASH).decode("ascii", "replace").strip()
        return fmt.parse_manifest(data, expected)

    def _read_small(self, member: str) -> bytes:
        try:
            return self._zip.read(member)
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
            raise CheckpointIntegrityError(f"part {member!r} of {self.path} is corrupted: {exc}") from exc

    def extract(self, part: dict, target: Path) -> Path:
        """Copy one part to target, checking its SHA-256; a mismatch removes target and raises."""
        member = part["member"]
        if member not in self._names:
            raise CheckpointIntegrityError(f"part {member!r} is listed in the manifest but missing from "
                                           f"{self.path}")
        try:
            with self._zip.open(member) as src, open(target, "wb") as dst:
                digest, _ = fmt.copy_hashed(src, dst)
        except (zipfile.BadZipFile, EOFError, ValueError) as exc:
            _remove(target)
            raise CheckpointIntegrityError(f"part {member!r} of {self.path} is corrupted: {exc}") from exc
        except OSError as exc:
            _remove(target)
            raise CheckpointError(f"cannot extract part {member!r} of {self.path}: {exc}") from exc
        if digest != part["sha256"]:
            _remove(target)
            raise CheckpointIntegrityError(f"part {member!r} of {self.path} does not match its recorded SHA-256 "
                                           "(it was changed or corrupted)")
        return target


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
