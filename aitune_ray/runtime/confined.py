"""Files inside one folder, reached through that folder's descriptor without following a symbolic link.

A folder that someone else can write (a run folder on a shared disk, the folder of a report someone handed over)
may hold symbolic links, FIFOs or names with ``..`` where a file is expected. Every path here is a relative name
inside a root folder: each component is opened with ``O_NOFOLLOW`` relative to the one before (``openat``), so a
link anywhere inside is refused rather than followed, and a name that climbs out (``..``, absolute) is refused
before anything is opened. Only regular files are read. Writes go to ``.NAME.part`` beside the target (created
exclusively, never through a link) and are renamed over it: a kill leaves the old file or the new one.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Iterable, Iterator

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)   # a FIFO never blocks
CHUNK = 1 << 20


class OutsideError(ValueError):
    """A name that is not a plain relative path inside the folder, or a link, FIFO or folder where a file is."""


def parts(name: str) -> list[str]:
    """name's components; OutsideError unless it is a plain relative path (no '..', '.', empty part, absolute)."""
    if not isinstance(name, str) or not name or "\0" in name or "\\" in name or name.startswith("/"):
        raise OutsideError(f"{name!r} is not a plain relative path")
    found = name.split("/")
    if any(part in ("", ".", "..") for part in found):
        raise OutsideError(f"{name!r} is not a plain relative path")
    return found


def part_name(name: str) -> str:
    """The temporary name a write of name goes through first."""
    return f".{name}.part"


def open_root(path: str | Path) -> int:
    """A descriptor of the folder at path (itself not a symbolic link)."""
    return os.open(path, DIR_FLAGS)


def open_dir(root: int, names: list[str], create: bool = False) -> int:
    """A descriptor of the folder root/names..., each component opened without following a link (made, mode
    0700, where create and missing). The caller closes it."""
    fd = os.dup(root)
    try:
        for name in names:
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (20, 40):   # ENOTDIR, ELOOP: a file or a symbolic link where a folder is
                    raise OutsideError(f"{name!r} is a link or a file, not a folder") from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(root: int, name: str) -> int:
    """A read descriptor of the regular file root/name (OutsideError for a link, FIFO, device or folder)."""
    *folders, base = parts(name)
    parent = open_dir(root, folders)
    try:
        try:
            fd = os.open(base, FILE_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno == 40:   # ELOOP: a symbolic link
                raise OutsideError(f"{name!r} is a symbolic link") from None
            raise
    finally:
        os.close(parent)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OutsideError(f"{name!r} is not a regular file")
    return fd


def chunks(fd: int) -> Iterator[bytes]:
    """The bytes of an open file, block by block; the descriptor is closed at the end."""
    try:
        while True:
            block = os.read(fd, CHUNK)
            if not block:
                return
            yield block
    finally:
        os.close(fd)


def read(root: int, name: str, limit: int | None = None) -> bytes:
    """The bytes of root/name (OutsideError when it is larger than limit)."""
    data, size = [], 0
    for block in chunks(open_file(root, name)):
        size += len(block)
        if limit is not None and size > limit:
            raise OutsideError(f"{name!r} is larger than {limit} bytes")
        data.append(block)
    return b"".join(data)


def write(root: int, name: str, blocks: Iterable[bytes]) -> str:
    """Write blocks to root/name through .NAME.part and a rename; returns the SHA-256 of what was written."""
    *folders, base = parts(name)
    parent = open_dir(root, folders, create=True)
    temp = part_name(base)
    digest = hashlib.sha256()
    try:
        try:
            os.unlink(temp, dir_fd=parent)   # a killed write's leftover (or a planted link: removed, not followed)
        except FileNotFoundError:
            pass
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        try:
            with os.fdopen(fd, "wb", closefd=True) as out:
                for block in blocks:
                    digest.update(block)
                    out.write(block)
            os.replace(temp, base, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=parent)
            except OSError:
                pass
            raise
    finally:
        os.close(parent)
    return digest.hexdigest()


def remove(root: int, name: str) -> None:
    """Remove root/name and its .NAME.part, where they are (a link is removed, never followed)."""
    *folders, base = parts(name)
    try:
        parent = open_dir(root, folders)
    except (FileNotFoundError, OutsideError):
        return
    try:
        for entry in (base, part_name(base)):
            try:
                os.unlink(entry, dir_fd=parent)
            except (FileNotFoundError, IsADirectoryError):
                pass
    finally:
        os.close(parent)


def remove_empty_dir(root: int, name: str) -> None:
    """Remove the folder root/name when it is empty (a folder with anything in it stays)."""
    *folders, base = parts(name)
    try:
        parent = open_dir(root, folders)
    except (FileNotFoundError, OutsideError):
        return
    try:
        os.rmdir(base, dir_fd=parent)
    except OSError:
        pass
    finally:
        os.close(parent)


def listing(root: int, prefix: str = "") -> tuple[list[str], list[str]]:
    """(every entry that is not a folder, every folder) under root, as relative names; links are not entered."""
    files, folders = [], []
    with os.scandir(root) as entries:
        found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in sorted(found):
        if not is_dir:
            files.append(prefix + name)
            continue
        folders.append(prefix + name)
        fd = os.open(name, DIR_FLAGS, dir_fd=root)
        try:
            more_files, more_folders = listing(fd, f"{prefix}{name}/")
        finally:
            os.close(fd)
        files += more_files
        folders += more_folders
    return files, folders
