"""Temporary folders of this process, named with their owner's pid, so that a killed process's leftovers go.

Every temporary folder the tuner makes is ``aitune-ray-<kind>-p<pid>-<random>`` in the system's temporary
directory. A process that is killed (SIGKILL, a crash) removes nothing; the next process that makes one of
these folders first removes those whose owner pid is gone, that belong to this user, and that were not
marked to be kept (keep(): a folder whose logs a report names).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

PREFIX = "aitune-ray-"
KEEP = ".kept"   # a file in a folder that must outlive its owner
_OWNED = re.compile(r"^aitune-ray-[a-z]+(?:-[a-z]+)*-p(\d+)-")
_swept = False
_lock = threading.Lock()


def make(kind: str) -> Path:
    """A new private folder (mode 0700) named for kind and this process; leftovers of dead owners go first."""
    global _swept
    with _lock:
        if not _swept:
            _swept = True
            sweep()
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-p{os.getpid()}-"))


def keep(folder: str | Path) -> None:
    """Mark folder to outlive its owner (the sweep leaves it)."""
    (Path(folder) / KEEP).touch()


def owner_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process: alive
        return True
    return True


def sweep(root: str | Path | None = None) -> list[Path]:
    """Remove the folders under root (default: the temporary directory) of owners that are gone."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        found = _OWNED.match(entry.name)
        if found is None or owner_alive(int(found.group(1))):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            if os.path.exists(os.path.join(entry.path, KEEP)):
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    if removed:
        logger.info("removed %d temporary folder(s) of aitune-ray processes that are gone", len(removed))
    return removed
