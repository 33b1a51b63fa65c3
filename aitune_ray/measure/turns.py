"""Turns at one GPU for the processes that share it: timings alone, builds side by side.

Several tuner actors may share one GPU (RayExecutor(gpus_per_actor=0.5): two per GPU), so that one
compiles while another compiles too: a build is mostly host work. A timing must not share the GPU, nor
the host, with a build: the other process's compile would slow a host-bound call, and its kernels the
device. So a timing holds the GPU's lock exclusively and a build holds it shared: builds overlap each
other, a timing waits until the builds under way on that GPU are done, and builds wait for it.

The lock is an flock on a file named by the GPU's UUID in the temp folder, so it binds every process on
that machine, whatever started it, and the kernel releases it when its holder dies (a crashed build
never leaves a GPU locked). A process keeps one such file open per GPU; its threads take turns at it
one at a time, and a timing inside a build's turn (or the other way round) converts the lock in place
instead of waiting for itself. On the CPU, or where the GPU is not shared, turns cost nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import tempfile
import threading
import time
from typing import Iterator

import torch

from aitune_ray.runtime.device import gpu_uuid

logger = logging.getLogger(__name__)

_SHARED, _ALONE = fcntl.LOCK_SH, fcntl.LOCK_EX
_guard = threading.Lock()
_turns: dict[str, "GpuTurns"] = {}


def shares_gpu(gpu_share: float) -> bool:
    """Whether a worker holding gpu_share GPUs shares its GPU with others (and so takes turns at it)."""
    return 0 < gpu_share < 1


def lock_path(key: str, folder: str | None = None) -> str:
    """The lock file of the GPU named key (its UUID, hex digits and dashes), in folder (default: the temp
    folder)."""
    return os.path.join(folder or tempfile.gettempdir(), f"aitune-ray-gpu-{key}.lock")


class GpuTurns:
    """The turns at one GPU, for this process: building() shares the GPU, timing() has it alone."""

    def __init__(self, path: str):
        self.path = path
        self.waited_s = 0.0        # time spent waiting for other processes' turns (reported by the worker)
        self._lock = threading.RLock()
        self._fd: int | None = None
        self._held: list[int] = []  # the modes held by the thread inside, innermost last

    def building(self) -> contextlib.AbstractContextManager:
        return self._turn(_SHARED)

    def timing(self) -> contextlib.AbstractContextManager:
        return self._turn(_ALONE)

    @contextlib.contextmanager
    def _turn(self, mode: int) -> Iterator[None]:
        with self._lock:
            before = max(self._held, default=None)
            want = max(mode, before or mode)   # LOCK_EX > LOCK_SH: a timing's turn covers a build inside it
            if want != before:
                self._flock(want)
            self._held.append(want)
            try:
                yield
            finally:
                self._held.pop()
                after = max(self._held, default=None)
                if after != want:
                    self._flock(fcntl.LOCK_UN if after is None else after)

    def _flock(self, mode: int) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        if mode == fcntl.LOCK_UN:
            fcntl.flock(self._fd, mode)
            return
        try:
            fcntl.flock(self._fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            started = time.perf_counter()
            logger.debug("waiting for this GPU's turn (%s)", "timing" if mode == _ALONE else "build")
            fcntl.flock(self._fd, mode)
            self.waited_s += time.perf_counter() - started


class _NoTurns:
    """Turns where nothing shares the device: both are no-ops."""

    waited_s = 0.0

    def building(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def timing(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


NO_TURNS = _NoTurns()


def turns_for(device: torch.device, shared: bool, folder: str | None = None) -> GpuTurns | _NoTurns:
    """This process's turns at device's GPU when shared (one object per GPU), else NO_TURNS."""
    device = torch.device(device)
    if not shared or device.type != "cuda":
        return NO_TURNS
    index = device.index if device.index is not None else torch.cuda.current_device()
    path = lock_path(gpu_uuid(index) or f"index{index}", folder)
    with _guard:
        return _turns.setdefault(path, GpuTurns(path))
