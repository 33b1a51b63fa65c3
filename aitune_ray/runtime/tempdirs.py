"""Temporary folders of this process, in a private folder of this user, removed once their owner is gone.

Every temporary folder the tuner makes is ``<root>/<kind>-<owner>-<random>``:

- root is ``aitune-ray-<uid>`` in the system's temporary directory: a folder of this user's, mode 0700,
  checked (lstat: a folder, not a symlink, this user's, no access for others) every time a process starts
  using it. Nothing in the shared temporary directory is parsed or trusted: where that name is taken by
  something else (another user's file, a symlink, a folder others can enter), this process uses a private
  folder of its own instead (tempfile.mkdtemp) and says so.
- owner is a random token of this process. The process holds an exclusive flock on ``<root>/<owner>.lock``
  for as long as it lives; the kernel releases it when the process ends, however it ends, and a lock means
  the same in every pid namespace that shares the folder (a pid does not: containers reuse them).

The first folder a process makes in a root first sweeps it: a folder whose owner's lock can be taken (its
owner is gone) is removed, unless it was marked to be kept (keep(): a folder whose logs a report names).
A folder whose lock is held is never removed, whatever its pid or namespace.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

PREFIX = "aitune-ray-"
KEEP = ".kept"   # a file in a folder that must outlive its owner
_FOLDER = re.compile(r"[a-z]+(?:-[a-z]+)*-([0-9a-f]{16})-[A-Za-z0-9_]+")
_LOCK = re.compile(r"([0-9a-f]{16})\.lock")   # a lock file that has its name is locked already
_lock = threading.Lock()
_owners: dict[str, tuple[int, str, int]] = {}   # root -> (pid, token, descriptor of the held lock)
_fallbacks: dict[str, Path] = {}                 # shared temporary directory -> this process's own root


def make(kind: str) -> Path:
    """A new private folder (mode 0700) for kind, owned by this process; leftovers of gone owners go first."""
    with _lock:
        root = private_root()
        token, fresh = _owner(root)
        if fresh:
            sweep(root)
    return Path(tempfile.mkdtemp(prefix=f"{kind}-{token}-", dir=root))


@contextlib.contextmanager
def folder(kind: str):
    """make(kind) for the body of a with-block, removed afterwards."""
    made = make(kind)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def keep(folder: str | Path) -> None:
    """Mark folder to outlive its owner (the sweep leaves it)."""
    os.close(os.open(Path(folder) / KEEP, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))


def private_root(base: str | Path | None = None) -> Path:
    """This user's folder for temporary folders under base (default: the system's temporary directory)."""
    base = Path(base or tempfile.gettempdir())
    root = base / f"{PREFIX}{os.getuid()}"
    try:
        os.mkdir(root, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return _fallback(base, f"it cannot be made ({exc.strerror or exc})")
    problem = unsafe(root)
    return root if problem is None else _fallback(base, problem)


def unsafe(root: Path) -> str | None:
    """Why root may not hold this user's temporary folders, or None: it must be a folder (not a symlink) of this
    user's that no one else may enter."""
    try:
        info = os.lstat(root)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid != os.getuid():
        return f"it belongs to user {info.st_uid}"
    if info.st_mode & 0o077:
        return f"others may enter it (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _fallback(base: Path, problem: str) -> Path:
    key = str(base)
    if key not in _fallbacks:
        _fallbacks[key] = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getuid()}-", dir=base))
        logger.warning("%s is not used for temporary folders: %s; this process uses %s instead",
                       base / f"{PREFIX}{os.getuid()}", problem, _fallbacks[key])
    return _fallbacks[key]


def _owner(root: Path) -> tuple[str, bool]:
    """(this process's token in root, whether it was made now). The lock is taken before its file has its
    name, so a lock file that anyone sees is held from the start."""
    held = _owners.get(str(root))
    if held is not None and held[0] == os.getpid():
        return held[1], False
    token = secrets.token_hex(8)
    pending = root / f".{token}.lock.new"
    fd = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(pending, root / f"{token}.lock")
    _owners[str(root)] = (os.getpid(), token, fd)   # held until this process ends
    return token, True


def owner_alive(root: Path, token: str) -> bool:
    """Whether the process that owns token in root still lives: its lock is held."""
    try:
        fd = os.open(root / f"{token}.lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True   # not a file this module made: leave what it names alone
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True   # held (EWOULDBLOCK), or locks cannot be taken here: leave it
    finally:
        os.close(fd)   # releases the lock taken here, if any
    return False


def _own_tokens() -> set[str]:
    return {token for pid, token, _ in _owners.values() if pid == os.getpid()}


def sweep(root: str | Path | None = None) -> list[Path]:
    """Remove the folders in root (default: this user's private root) whose owners are gone, and their lock
    files. Only folders of this user's that are not symlinks and not marked to be kept are removed."""
    root = Path(root) if root is not None else private_root()
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    alive: dict[str, bool] = {token: True for token in _own_tokens()}
    for entry in entries:
        found = _FOLDER.fullmatch(entry.name)
        if found is None:
            continue
        token = found.group(1)
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            if os.path.lexists(os.path.join(entry.path, KEEP)):
                continue
        except OSError:
            continue
        if token not in alive:
            alive[token] = owner_alive(root, token)
        if alive[token]:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    for entry in entries:
        found = _LOCK.fullmatch(entry.name)
        if found is not None and found.group(1) not in _own_tokens() and not owner_alive(root, found.group(1)):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid():
                    os.unlink(entry.path)
    if removed:
        logger.info("removed %d temporary folder(s) of aitune-ray processes that are gone", len(removed))
    return removed
