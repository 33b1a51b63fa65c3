"""Reading and writing the user's files safely on a machine other users share.

- open_regular / read_regular: a file to read must be a regular file. It is opened without blocking (a FIFO
  planted where a file is expected would block an open for ever) and checked on the open descriptor (fstat),
  so a symlink to /dev/zero or a FIFO is refused, and nothing can be swapped in between the check and the
  read. A size limit bounds what is read.
- write_atomic: a file is written into a new temporary file created beside it (O_CREAT | O_EXCL |
  O_NOFOLLOW: never a path that exists, never through a symlink), flushed, and renamed over the target.
  rename replaces a symlink planted at the target instead of writing where it points, and a reader sees
  the old file or the new one, never half of one.

Failures are OSError (NotRegularFile for a path that is not a regular file); callers say what it means.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class NotRegularFile(OSError):
    """A path to read is a FIFO, a device, a socket or a folder, or a file larger than allowed."""


def kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | Path, limit: int | None = None, follow: bool = True) -> int:
    """A descriptor of path opened for reading, once it is known to be a regular file (of at most limit bytes).
    follow=False refuses a symlink at path itself."""
    flags = os.O_RDONLY | _NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise NotRegularFile(errno.ELOOP, "is a symlink, not a regular file", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, f"is {kind_of(info.st_mode)}, not a regular file", str(path))
        if limit is not None and info.st_size > limit:
            raise NotRegularFile(errno.EFBIG, f"is {info.st_size} bytes, more than the {limit} allowed", str(path))
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | Path, limit: int, follow: bool = True) -> bytes:
    """The bytes of the regular file at path, at most limit of them (more is NotRegularFile)."""
    fd = open_regular(path, limit, follow)
    with os.fdopen(fd, "rb") as source:
        data = source.read(limit + 1)
    if len(data) > limit:   # it grew after the check
        raise NotRegularFile(errno.EFBIG, f"is more than the {limit} bytes allowed", str(path))
    return data


def create_new(path: str | Path, mode: int = 0o666) -> int:
    """A descriptor of a new file at path, open for writing: fails if anything (a symlink too) is there."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)


def temp_beside(path: Path) -> tuple[Path, int]:
    """(a new temporary file beside path, its descriptor open for writing)."""
    for _ in range(8):
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            return temp, create_new(temp)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "cannot create a new temporary file beside it", str(path))


def write_atomic(path: str | Path, data: bytes | str, sync: bool = False) -> Path:
    """Write data to path by renaming a new temporary file over it (see the module's note). A symlink at path
    is replaced, never followed; a folder at path is an error."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    if path.is_dir() and not path.is_symlink():
        raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
    temp, fd = temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            if sync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    return path


def copy_regular(source: str | Path, target: str | Path, limit: int | None = None) -> Path:
    """Copy the regular file source into a new file target (nothing may be at target)."""
    target = Path(target)
    fd = open_regular(source, limit)
    with os.fdopen(fd, "rb") as src:
        out_fd = create_new(target)
        try:
            with os.fdopen(out_fd, "wb") as dst:
                copied = 0
                for block in iter(lambda: src.read(1 << 20), b""):
                    copied += len(block)
                    if limit is not None and copied > limit:
                        raise NotRegularFile(errno.EFBIG, f"is more than the {limit} bytes allowed", str(source))
                    dst.write(block)
                dst.flush()
                os.fsync(dst.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                target.unlink()
            raise
    return target
