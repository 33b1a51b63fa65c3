"""Child processes that end whole: each runs in a process group (and session) of its own, and ending it
kills that group, so that what it started (a compiler, Inductor's compile workers, a helper of a user's
backend) does not outlive it.

The group is killed while the child is not yet reaped (wait() looks without reaping): its pid, the group's
id, cannot have been given to another process by then. A child in a session of its own gets no Ctrl-C from
the terminal; its parent ends it (end()) on KeyboardInterrupt as on a timeout. Linux and macOS.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


def start(argv: list[str], **popen_kwargs) -> subprocess.Popen:
    """subprocess.Popen(argv, ...) in a new session, hence a process group of its own."""
    return subprocess.Popen(argv, start_new_session=True, **popen_kwargs)


def wait(proc: subprocess.Popen, timeout_s: float | None) -> int:
    """The child's exit code once it ended, after its group was killed (what it started goes with it).
    Raises subprocess.TimeoutExpired after timeout_s, leaving it running (end() ends it)."""
    if not hasattr(os, "waitid") or proc.returncode is not None:
        code = proc.wait(timeout=timeout_s)
        end(proc)
        return code
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    delay = 0.001
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        time.sleep(delay if left is None else min(delay, left))
        delay = min(delay * 2, 0.05)
    end(proc)
    return proc.returncode


def end(proc: subprocess.Popen) -> None:
    """Kill the child's process group (the child and everything it started that stayed in it) and reap the
    child. The group is signalled only while the child is not reaped."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
