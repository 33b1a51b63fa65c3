"""Worker logs beside the report: a log a result names is copied next to the report, and the report links the
copy. A log that is gone by then (an executor removes its temporary logs when nothing failed) is linked
nowhere, so the report has no dead links."""

from __future__ import annotations

import copy
import logging
import shutil
from pathlib import Path

logger = logging.getLogger(__name__)


def keep_logs(run: dict, folder: Path, base: Path) -> dict:
    """run with each result's log_path copied into folder and made relative to the report's folder (folder's
    parent); a log that cannot be found is dropped. base: where a relative log_path is found (the folder of
    the JSON it was read from)."""
    run = copy.deepcopy(run)
    copies: dict[Path, str] = {}
    for module in (run.get("report") or {}).get("modules") or []:
        for result in module.get("results") or []:
            named = str(result.get("log_path") or "")
            result["log_path"] = _kept(named, folder, base, copies) if named else ""
    return run


def _kept(named: str, folder: Path, base: Path, copies: dict[Path, str]) -> str:
    source = Path(named) if Path(named).is_absolute() else base / named
    if not source.is_file():
        return ""
    source = source.resolve()
    if source not in copies:
        target = folder / source.name
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if target.resolve() != source:
                shutil.copyfile(source, target)
        except OSError as exc:
            logger.warning("log %s not kept beside the report: %s", source, exc)
            return ""
        copies[source] = f"{folder.name}/{target.name}"
    return copies[source]
