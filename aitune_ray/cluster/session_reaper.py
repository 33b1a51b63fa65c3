"""Ends the Ray session a driver started on this machine when that driver dies without closing it.

A Ray that ray.init() starts here ends with a driver that exits or is stopped by a signal it can handle.
A SIGKILLed driver takes the processes it started itself along (Linux: they die with their parent), but
Ray's dashboard and runtime-env agents, children of the raylet, find out on their own and then try to report
to a GCS that is gone: they lived on for 60 to 120 s. This watcher is started by the driver right after
its Ray is up: a small process of its own session that holds the read end of a pipe from the driver. When
the driver closes its Ray itself, it says "done" first and the watcher leaves. When the pipe closes without
"done" (the driver is gone, however it died), it kills the processes it recorded, and only those.

What it records: the processes Ray started for this session (the driver passes their pids: GCS, raylet,
monitors), and, while the driver lives, every process that descends from one of them (the raylet's agents
and workers), each by pid and start time, so that a pid the system gave to another process since is left
alone. A process is never chosen by its command line: one that merely names the session's folder (a
`tail -f` of its log) is not Ray's. Linux only (/proc); elsewhere nothing is started.

Run as ``python -m aitune_ray.cluster.session_reaper PID...`` by SessionReaper only.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

logger = logging.getLogger(__name__)

DONE = b"done\n"
READY = b"ready\n"
SCAN_S = 0.5          # between looks for new descendants of the recorded processes
READY_WAIT_S = 10.0   # the driver waits this long at most for the watcher's first record


class SessionReaper:
    """The watcher of one Ray session, given the pids of the processes Ray started for it. It has recorded
    them and their descendants when the constructor returns. close() tells it the driver closed the session
    itself."""

    def __init__(self, pids: list[int]):
        self.proc: subprocess.Popen | None = None
        if not Path("/proc/self/stat").exists() or not pids:
            return
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", __name__, *map(str, pids)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True)
        except OSError as exc:
            logger.warning("the watcher that ends this Ray session if this process dies could not start: %s", exc)
            return
        ready, _, _ = select.select([self.proc.stdout], [], [], READY_WAIT_S)
        if not ready or self.proc.stdout.readline() != READY:
            logger.warning("the watcher that ends this Ray session if this process dies did not start in %.0f s",
                           READY_WAIT_S)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.write(DONE)
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of pid, or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as src:
            fields = src.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), int(fields[19])


def _own_processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time) of every live process of this user."""
    uid, found = os.getuid(), {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        stat = _stat(int(entry.name))
        if stat is not None:
            found[int(entry.name)] = stat
    return found


class Record:
    """The processes of one session: pid -> start time, as first seen."""

    def __init__(self, pids: list[int]):
        self.started: dict[int, int] = {}
        for pid in pids:
            stat = _stat(pid)
            if stat is not None:
                self.started[pid] = stat[1]

    def scan(self) -> None:
        """Add every live descendant of a recorded process; forget recorded processes that are gone."""
        table = _own_processes()
        self.started = {pid: start for pid, start in self.started.items()
                        if pid in table and table[pid][1] == start}
        children: dict[int, list[int]] = {}
        for pid, (parent, _) in table.items():
            children.setdefault(parent, []).append(pid)
        todo = list(self.started)
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in self.started and child != os.getpid():
                    self.started[child] = table[child][1]
                    todo.append(child)

    def alive(self) -> list[int]:
        """The recorded processes that still run as the same process (pid and start time)."""
        out = []
        for pid, start in self.started.items():
            stat = _stat(pid)
            if stat is not None and stat[1] == start:
                out.append(pid)
        return out


def _reap(pids: list[int]) -> None:
    record = Record(pids)
    record.scan()
    os.write(sys.stdout.fileno(), READY)
    said = b""
    while True:   # until the driver closes its end: by close(), or by dying
        readable, _, _ = select.select([sys.stdin.fileno()], [], [], SCAN_S)
        if readable:
            chunk = os.read(sys.stdin.fileno(), 64)
            if not chunk:
                break
            said += chunk
        else:
            record.scan()
    if said.startswith(DONE):
        return
    record.scan()   # what was started since the last look, where its parent still lives
    for sig, grace_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 0.0)):
        left = record.alive()
        for pid in left:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace_s
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = record.alive()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a Ctrl-C meant for the driver is not meant for this
    _reap([int(arg) for arg in sys.argv[1:]])
