"""How the aitune-ray command shows the library's logs: plain lines or JSON objects, on stderr.

-q shows errors only, the default warnings, -v info and -vv debug. With --log-json every record is one
JSON object per line: time (driver wall clock, seconds since the epoch), level, logger, message, and the
exception text when there is one.
"""

from __future__ import annotations

import json
import logging
from typing import IO

from aitune_ray.runtime.printable import printable


class PlainFormatter(logging.Formatter):
    """``LEVEL logger: message`` lines, control characters written out (a traceback keeps its lines)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), lines=True)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {"time": round(record.created, 6), "level": record.levelname, "logger": record.name,
                "message": record.getMessage()}
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def level(verbose: int = 0, quiet: bool = False) -> int:
    if quiet:
        return logging.ERROR
    return {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)


class LogSetup:
    """Installs one handler on the root logger for the command's lifetime (a context manager)."""

    def __init__(self, stream: IO, verbose: int = 0, quiet: bool = False, json_lines: bool = False):
        self.handler = logging.StreamHandler(stream)
        self.handler.setFormatter(JsonFormatter() if json_lines else
                                  PlainFormatter("%(levelname)s %(name)s: %(message)s"))
        self.level = level(verbose, quiet)
        self._old = None

    def __enter__(self) -> "LogSetup":
        root = logging.getLogger()
        self._old = root.level
        root.addHandler(self.handler)
        root.setLevel(self.level)
        return self

    def __exit__(self, *exc) -> None:
        root = logging.getLogger()
        root.removeHandler(self.handler)
        root.setLevel(self._old)
