"""Ends the Ray session a driver started on this machine when that driver dies without closing it.

A Ray that ray.init() starts here ends with a driver that exits or is stopped by a signal it can handle.
A SIGKILLed driver takes the processes it started itself along (Linux: they die with their parent), but
Ray's dashboard and runtime-env agents, children of the raylet, find out on their own and then try to report
to a GCS that is gone: they lived on for 60 to 120 s. This watcher is started by the driver right after
its Ray is up: a small process of its own session that holds the read end of a pipe from the driver. When
the pipe closes without the driver's "done" (the driver is gone, however it died), it kills every process
of this user whose command line names the session's folder, which is unique to that Ray session. When the
driver closes its Ray itself, it says "done" first and the watcher leaves. Linux only (/proc); elsewhere
nothing is started.

Run as ``python -m aitune_ray.cluster.session_reaper SESSION_DIR`` by start() only.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

logger = logging.getLogger(__name__)

DONE = b"done\n"


class SessionReaper:
    """The watcher of one Ray session (session_dir: Ray's folder of that session, in every process's
    arguments). close() tells it the driver closed the session itself."""

    def __init__(self, session_dir: str):
        self.session_dir = session_dir
        self.proc: subprocess.Popen | None = None
        if not Path("/proc/self/cmdline").exists():
            return
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", __name__, session_dir], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True)
        except OSError as exc:
            logger.warning("the watcher that ends this Ray session if this process dies could not start: %s", exc)

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


def session_processes(session_dir: str) -> list[int]:
    """PIDs of this user's processes whose command line names session_dir (not this process)."""
    needle, uid, found = session_dir.encode(), os.getuid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != uid or needle not in (entry / "cmdline").read_bytes():
                continue
        except OSError:
            continue
        found.append(int(entry.name))
    return found


def _reap(session_dir: str) -> None:
    said = sys.stdin.buffer.read()   # until the driver closes its end: by close(), or by dying
    if said.startswith(DONE):
        return
    for sig, grace_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 0.0)):
        pids = session_processes(session_dir)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if Path(f"/proc/{p}").exists()]
            time.sleep(0.05)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a Ctrl-C meant for the driver is not meant for this
    _reap(sys.argv[1])
