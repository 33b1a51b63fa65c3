"""A worker process's warm-up: the one-time costs of its first compile, paid before its first task needs them.

The warm-up runs in steps on a thread of its own, so that a tuner actor answers at once. The first task
stops it (WarmUp.stop): the step under way ends, the others are skipped, and the task goes on. A warm-up
therefore never delays work by more than one step, and where the driver has work ready before the actor is
up (one local GPU, a short recording), the builds pay the compiler's first use themselves, as inline does,
instead of waiting for a compile of a function of the warm-up's own.

Modes:
- "compile": start Inductor's compile workers, make the CUDA context, compile and run a small function
  (Dynamo, Inductor and Triton's first use), import TorchAO;
- "imports": the same without that compile: the compiler's modules are imported;
- "off": only the thread counts.
Every mode first sets the thread counts (Inductor's compile workers, torch's intra-op threads); that step
is always done, even when a task stops the warm-up at once.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
import time
from typing import Callable

import torch

logger = logging.getLogger(__name__)

WARM_UP_MODES = ("compile", "imports", "off")


def _compile_pool() -> None:
    from torch._inductor.async_compile import maybe_warm_pool

    maybe_warm_pool()   # in the background: the compile workers start while the rest goes on


def _cuda_context() -> None:
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()


def _compiler_import() -> None:
    importlib.import_module("torch._inductor.compile_fx")
    if importlib.util.find_spec("triton") is not None:
        from triton.runtime import driver

        driver.active.utils   # noqa: B018 - Triton builds its launcher utilities on first use


def _first_compile() -> None:
    compiled = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2.0 + 1.0)
    compiled(torch.randn(64, 64, device="cuda"))
    torch.cuda.synchronize()


def _torchao_import() -> None:
    if importlib.util.find_spec("torchao") is not None:
        from aitune_ray.runtime.quiet import import_quietly

        import_quietly("torchao.quantization")


def steps_for(mode: str) -> list[tuple[str, Callable[[], None]]]:
    """The skippable steps of mode, in order, each (name of its seconds, function)."""
    if mode not in WARM_UP_MODES:
        raise ValueError(f"warm-up mode must be one of {', '.join(WARM_UP_MODES)}, got {mode!r}")
    if mode == "off":
        return []
    middle = [("compiler_import_s", _compiler_import)] if mode == "imports" else [("first_compile_s", _first_compile)]
    return [("compile_pool_start_s", _compile_pool), ("cuda_context_s", _cuda_context), *middle,
            ("torchao_import_s", _torchao_import)]


class WarmUp:
    """compile_threads: CPU threads for Inductor's compile workers and torch's intra-op work. steps: the
    skippable steps (default steps_for(mode)).

    start() sets torch's thread count here and runs the rest on a thread; stop() ends it after the step under
    way and returns each part's seconds; run() does it all on the caller's thread."""

    def __init__(self, compile_threads: int, mode: str = "compile",
                 steps: list[tuple[str, Callable[[], None]]] | None = None):
        self.compile_threads, self.mode = compile_threads, mode
        self.steps = steps_for(mode) if steps is None else steps
        self.began_at: float | None = None   # wall clock
        self.ended_at: float | None = None
        self._seconds: dict = {}
        self._skipped: list[str] = []
        self._lock = threading.Lock()
        self.stopping = threading.Event()   # set by stop(): what is left is skipped
        self._thread: threading.Thread | None = None

    def _set_threads(self) -> None:
        # On the thread that runs the tasks: the intra-op thread count belongs to the calling thread. So may
        # Inductor's settings (torch 2.13 keeps them per thread): its default, read from the environment at
        # its import, is set for every thread, and the value itself on this one once imported (stop, run).
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(self.compile_threads)
        torch.set_num_threads(self.compile_threads)
        self._record(torch_threads=torch.get_num_threads())

    def _set_compile_threads(self) -> int:
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = self.compile_threads
        return inductor_config.compile_threads

    def start(self) -> None:
        self._set_threads()
        self._thread = threading.Thread(target=self._run, name="warm-up", daemon=True)
        self._thread.start()

    def stop(self) -> dict:
        """Skip what is left after the step under way, wait for that step, and return the seconds."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join()
            if "inductor_config_import_s" in self.seconds():   # Inductor's import, the first step, succeeded
                self._set_compile_threads()
        return self.seconds()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the warm-up to end by itself (nothing is skipped); True when it has ended."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.ended_at is not None

    def run(self) -> dict:
        """The whole warm-up on this thread (nothing stops it)."""
        self._set_threads()
        self._run()
        return self.seconds()

    def seconds(self) -> dict:
        """Each part's seconds so far, the thread counts, the mode and the skipped steps."""
        with self._lock:
            out = dict(self._seconds)
            if self._skipped:
                out["skipped"] = list(self._skipped)
        out["mode"] = self.mode
        return out

    def stamps(self) -> dict:
        """{"warm_up": seconds(), "warm_up_began_at", "warm_up_ended_at"} (wall clock; None until then)."""
        return {"warm_up": self.seconds(), "warm_up_began_at": self.began_at, "warm_up_ended_at": self.ended_at}

    def _record(self, **values) -> None:
        with self._lock:
            self._seconds.update(values)

    def _run(self) -> None:
        self.began_at = time.time()
        started = time.perf_counter()
        try:
            compile_threads = self._set_compile_threads()   # the first step (Inductor's import), never skipped
        except Exception as exc:  # the tasks then meet the same failure in their own build, with its own error
            logger.warning("warm-up: Inductor's import failed: %s", exc)
            self.ended_at = time.time()
            return
        self._record(inductor_config_import_s=time.perf_counter() - started)
        for index, (name, step) in enumerate(self.steps):
            if self.stopping.is_set():
                with self._lock:
                    self._skipped = [n for n, _ in self.steps[index:]]
                logger.info("warm-up stopped by the first task: %s skipped", ", ".join(self._skipped))
                break
            mark = time.perf_counter()
            try:
                step()
            except Exception as exc:  # a warm-up failure is only a lost head start
                logger.warning("warm-up step %s failed: %s", name, exc)
                break
            self._record(**{name: time.perf_counter() - mark})
        self._record(warm_up_s=time.perf_counter() - started, compile_threads=compile_threads)
        self.ended_at = time.time()
        logger.info("warm-up (%s) took %.1f s (compile threads %d): %s", self.mode, time.perf_counter() - started,
                    self.compile_threads, self.seconds())


def warm_up(compile_threads: int, mode: str = "compile") -> dict:
    """The whole warm-up of mode on this thread; returns each part's seconds."""
    return WarmUp(compile_threads, mode).run()
