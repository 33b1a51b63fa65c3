"""The aitune-ray command's view of a job's progress events: a live table on a terminal, lines otherwise.

ProgressView is a progress callback (see aitune_ray.report.events for the events' fields). On a terminal
it keeps a rich table with a row per candidate (queued, building, checking, measuring, done or failed),
where it runs, its elapsed time, and the best candidate so far where the events say how fast one is;
without a terminal (CI, ``ray job submit`` logs) it writes one plain line per event, or one JSON object
per event with json=True. It writes only to the stream it is given: the command owns the terminal.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import IO

from aitune_ray.report.events import TERMINAL, actor_row
from aitune_ray.runtime.printable import printable

STATES = {"queued": "queued", "building": "building", "checking": "checking", "measuring": "measuring",
          "planning": "planning", "remeasuring": "re-measuring", "profiling": "profiling"}


def event_line(event: dict) -> str:
    """One plain line for an event: ``[module] building  Backend on node, gpu`` or ``[module] done ...``."""
    where = ", ".join(str(event[k]) for k in ("node", "gpu") if event.get(k))
    where = f" on {where}" if where else ""
    module, name, task = event.get("module", "?"), event.get("event", ""), event.get("task") or ""
    backend = event.get("backend") or event.get("key") or ""
    if not backend:              # a module-wide task: the eager baseline, the side-by-side re-measure
        what = task or "?"
    else:
        what = backend + (f" ({task})" if task and task != "build" else "")
    if name not in TERMINAL:
        return f"[{module}] {STATES.get(name, name):<9} {what}{where}"
    status = event.get("status", "?")
    word = "done    " if status == "ok" else "FAILED  " if status != "cancelled" else "stopped "
    elapsed = event.get("elapsed_s")
    took = f" after {elapsed:.1f} s" if isinstance(elapsed, (int, float)) else ""
    return f"[{module}] {word}{what}: {status}{took}{where}"


def cell(text) -> str:
    """A live table's cell: printable, and rich's markup in it ([red]) shown as written."""
    from rich.markup import escape

    return escape(printable(text))


def is_terminal(stream: IO) -> bool:
    try:
        return bool(stream.isatty()) and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


def _has_rich() -> bool:
    import importlib.util

    return importlib.util.find_spec("rich") is not None


class ProgressView:
    """A progress callback that shows the events on stream (live=None: a live table when it is a terminal).

    Use as a context manager around the job: the live table starts on entry and stays on screen at exit.
    """

    def __init__(self, stream: IO, live: bool | None = None, json_lines: bool = False, enabled: bool = True):
        self.stream, self.json_lines, self.enabled = stream, json_lines, enabled
        self.live = (is_terminal(stream) if live is None else live) and enabled and not json_lines and _has_rich()
        self.rows: dict[tuple[str, str], dict] = {}
        self.best: dict[str, tuple[float, str]] = {}     # module -> (speedup, backend)
        self._lock = threading.RLock()   # the live table's refresh thread reads the rows too
        self._live = None

    # ----- the callback ---------------------------------------------------------------------------
    def __call__(self, event: dict) -> None:
        with self._lock:
            self._update(event)
            if not self.enabled:
                return
            if self.json_lines:
                self._write(json.dumps(event, default=str, sort_keys=True))
            elif not self.live:
                self._write(event_line(event))

    def _update(self, event: dict) -> None:
        task = str(event.get("task") or "")
        ident = (str(event.get("module", "?")), str(event.get("key") or event.get("backend") or task or "?"))
        row = self.rows.setdefault(ident, {"module": ident[0], "backend": event.get("backend") or ident[1],
                                           "since": time.monotonic(), "state": "", "where": "", "elapsed": None})
        name = event.get("event", "")
        if name in TERMINAL:
            row["state"] = event.get("status") or name
            row["elapsed"] = event.get("elapsed_s")
        else:
            row["state"] = STATES.get(name, name)
            if name != "queued" and not row.get("running"):
                row["running"], row["since"] = True, time.monotonic()
        if event.get("node") or event.get("gpu"):
            row["where"] = actor_row(event.get("node"), event.get("gpu"))
        speedup = event.get("speedup")
        if name in TERMINAL and event.get("status") == "ok" and isinstance(speedup, (int, float)):
            if speedup > self.best.get(ident[0], (0.0, ""))[0]:
                self.best[ident[0]] = (float(speedup), row["backend"])

    def _write(self, text: str) -> None:
        print(printable(text), file=self.stream, flush=True)   # one line, whatever the names in it hold

    # ----- the live table ------------------------------------------------------------------------
    def table(self):
        from rich.table import Table

        with self._lock:
            best = cell("; ".join(f"{m}: {b} ({s:.2f}x)" for m, (s, b) in self.best.items()))
        table = Table(title="aitune-ray", caption=f"best so far: {best}" if best else None, expand=False)
        for column in ("module", "candidate", "state", "where", "elapsed"):
            table.add_column(column)
        now = time.monotonic()
        with self._lock:
            rows = [dict(r) for r in self.rows.values()]
        for row in rows:
            done = isinstance(row["elapsed"], (int, float))
            elapsed = row["elapsed"] if done else (now - row["since"] if row.get("running") else None)
            state = row["state"]
            style = "green" if state == "ok" else "red" if state in ("error", "crashed", "timed out", "oom",
                                                                       "rejected") else None
            module, backend, state_text, where = (cell(row[k]) for k in ("module", "backend", "state", "where"))
            table.add_row(module, backend, f"[{style}]{state_text}[/]" if style else state_text, where,
                          "" if elapsed is None else f"{elapsed:.1f} s")
        return table

    def __enter__(self) -> "ProgressView":
        if self.live:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.stream)
            self._live = Live(self.table(), console=console, refresh_per_second=4,
                              get_renderable=self.table)
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
