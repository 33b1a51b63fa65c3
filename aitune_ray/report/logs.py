"""Worker logs beside the report: a log a result names is copied next to the report, and the report links the
copy. A log that is gone by then (an executor removes its temporary logs when nothing failed), or empty (a
worker that logged nothing), is linked nowhere, so every link of the report opens a file with something in it.

A job's JSON report may come from someone else (``aitune-ray report RUN.json``): there a log path is data, and
only a plain relative path inside the JSON's own folder is followed (no ``..``, no absolute path, no symbolic
link anywhere on the way, a regular file only); anything else is linked nowhere and nothing is copied. The
copies are written beside the report through a temporary file and a rename, never through a link found there.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path

from aitune_ray.records.artifacts import write_atomic
from aitune_ray.runtime import confined

logger = logging.getLogger(__name__)


def keep_logs(run: dict, folder: Path, base: Path, confine: bool = False) -> dict:
    """run with each result's log_path copied into folder and made relative to the report's folder (folder's
    parent); a log that cannot be found is dropped. base: where a relative log_path is found (the folder of
    the JSON it was read from). confine: the paths are data from a file (aitune-ray report): only files inside
    base are copied."""
    run = copy.deepcopy(run)
    copies: dict[str, str] = {}
    for module in (run.get("report") or {}).get("modules") or []:
        for result in module.get("results") or []:
            named = str(result.get("log_path") or "")
            result["log_path"] = _kept(named, folder, base, copies, confine) if named else ""
    return run


def _read(named: str, base: Path, confine: bool) -> tuple[str, bytes] | None:
    """(the log's file name, its bytes), or None where it is not there (or, confined, not inside base)."""
    if not confine:
        source = Path(named) if Path(named).is_absolute() else base / named
        try:
            return source.name, source.read_bytes() if source.is_file() else None
        except OSError:
            return None
    try:
        root = confined.open_root(base)
    except OSError:
        return None
    try:
        return named.rsplit("/", 1)[-1], confined.read(root, named)
    except FileNotFoundError:   # gone by now, as a run's temporary logs are: linked nowhere
        return None
    except (OSError, confined.OutsideError) as exc:
        logger.warning("log %r not kept beside the report: %s (only files inside %s are)", named[:200], exc, base)
        return None
    finally:
        os.close(root)


def _kept(named: str, folder: Path, base: Path, copies: dict[str, str], confine: bool) -> str:
    if named in copies:
        return copies[named]
    found = _read(named, base, confine)
    if found is None or not found[1]:   # gone, or empty (a worker that logged nothing): no link to open
        return ""
    name, data = found
    target = folder / name
    try:
        if not (target.is_file() and not target.is_symlink() and target.read_bytes() == data):
            write_atomic(target, data)
    except OSError as exc:
        logger.warning("log %s not kept beside the report: %s", name, exc)
        return ""
    copies[named] = f"{folder.name}/{target.name}"
    return copies[named]
