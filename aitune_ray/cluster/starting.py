"""A local Ray started on a thread of its own, so that the driver records, builds its model, times eager
and profiles while Ray's processes and the first tuner actors come up.

Two things tie such a start to its thread:
- Ray's processes (GCS, raylet, monitors) share the fate of the thread that started them: on Linux they are
  killed when that thread ends (PR_SET_PDEATHSIG follows the thread, not the process). So the thread lives
  on, idle, until release(), which comes after ray.shutdown().
- ray.init() sets its SIGTERM handler (exit, so that Ray is shut down at exit) only on the main thread, and
  warns otherwise. Background sets the same handler from the caller's thread instead, unless the program
  has a handler of its own, and keeps that warning out of the log.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Callable

from aitune_ray.errors import ClusterError

logger = logging.getLogger(__name__)

_RAY_WORKER_LOGGER = "ray._private.worker"


class _NoSigtermWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def _exit(signum, frame) -> None:
    sys.exit(signum)


def _exit_on_sigterm() -> bool:
    """What ray.init() does on the main thread: SIGTERM exits, and Ray's exit hook shuts it down. Returns
    whether it set that handler (not on another thread, nor over the program's own)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None, _exit):
        signal.signal(signal.SIGTERM, _exit)
        return True
    return False


class Background:
    """start() runs on a daemon thread, which then stays until release(); wait() waits for start() to end and
    raises what it raised, as ClusterError."""

    def __init__(self, start: Callable[[], None], what: str):
        self.what = what
        self.error: BaseException | None = None
        self._start = start
        self._started, self._released = threading.Event(), threading.Event()
        self._sigterm = _exit_on_sigterm()
        self._rearmed = False
        self._thread = threading.Thread(target=self._run, name="aitune-ray-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        quiet = _NoSigtermWarning()
        ray_logger = logging.getLogger(_RAY_WORKER_LOGGER)
        ray_logger.addFilter(quiet)
        try:
            self._start()
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
            self.error = exc
        finally:
            ray_logger.removeFilter(quiet)
            self._started.set()
        self._released.wait()   # the processes it started live as long as this thread

    def done(self) -> bool:
        return self._started.is_set()

    def wait(self) -> None:
        self._started.wait()
        if self._sigterm and not self._rearmed:
            # Ray's core worker, started on the thread, may have put its own SIGTERM handler (which aborts)
            # in place of this one: set it again, once, from the main thread
            self._rearmed = _exit_on_sigterm()
        if self.error is not None:
            raise ClusterError(f"{self.what} failed: {type(self.error).__name__}: {self.error}") from self.error

    def release(self) -> None:
        """Let the thread end (after ray.shutdown(): the processes it started go with it)."""
        self._released.set()
        self._thread.join()
