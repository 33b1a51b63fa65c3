"""Which values of a report become links: a worker log's path, when it is a plain relative or absolute file
path. A value with a scheme (``javascript:``, ``http:``) or characters outside a path's usual ones is shown
as text: a run record cannot make the report link anywhere else."""

from __future__ import annotations

import re

_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+-]+")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def log_link(name: str, value) -> str | None:
    """The link target for a detail named name with value, or None (shown as text)."""
    value = str(value)
    if name != "log" or not _PLAIN_PATH.fullmatch(value) or _SCHEME.match(value):
        return None
    return value
