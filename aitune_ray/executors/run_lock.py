"""A lock per run folder and per output path, held for the whole run, so that two runs never share one.

The lock is ``flock`` on a lock file the project owns (``.aitune-ray.lock`` inside a run folder,
``.NAME.lock`` beside an output); the holder writes its pid, host and start time into the file. A second run is
refused with one line naming that holder. The file is never deleted (a lock file that is removed and made again
would let two runs each hold "the" lock); the kernel drops the lock when its holder exits, however it ends,
so a killed run leaves no stale lock.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import platform
import weakref
from pathlib import Path

from aitune_ray.errors import RunFolderError

LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def _shown(text: object) -> str:
    """A holder's field as plain printable text (the file may be anyone's)."""
    return "".join(c for c in str(text) if c.isprintable())[:80]


def holder_text(fd: int) -> str:
    """Who holds the lock, as its holder wrote it: 'pid N on host H, since T'."""
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
        return (f"pid {int(data['pid'])} on host {_shown(data['host'])}, since {_shown(data['started'])}")
    except (OSError, ValueError, KeyError, TypeError):
        return "a holder that wrote no name"


class Lock:
    """An exclusive flock on name in the folder dir_fd (or at a path), taken now or refused; release() drops it
    (so does the object's end, and the process's)."""

    def __init__(self, name: str, dir_fd: int | None, what: str):
        try:
            fd = os.open(name, LOCK_FLAGS, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            raise RunFolderError(f"{what}: its lock file {name} cannot be opened ({exc.strerror or exc}); it is "
                                 "left alone") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = holder_text(fd)
            os.close(fd)
            raise RunFolderError(f"{what} is in use by another run ({holder}); wait for it to end, or choose "
                                 "another path") from None
        except BaseException:
            os.close(fd)
            raise
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        record = json.dumps({"pid": os.getpid(), "host": platform.node(), "started": started}).encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
        except OSError:
            pass   # the lock holds without its note
        self._finalizer = weakref.finalize(self, os.close, fd)

    @classmethod
    def beside(cls, path: str | Path, what: str) -> "Lock":
        """The lock of an output path: the file .NAME.lock in its folder."""
        path = Path(path)
        return cls(str(path.with_name(f".{path.name}.lock")), None, what)

    def release(self) -> None:
        self._finalizer()   # closing the descriptor drops the flock

    close = release
