"""The tuner: decides each module that is ready, with tune_modules (aitune_ray.api.tuning) on one executor.

Modules are tuned one after another on the tuner's own thread (or on the calling thread with blocking=True),
top-down: a module kept eager hands its recorded children on, down to max_depth_level. Before tuning, the
decision cache (aitune_ray.jit.cache) is asked; after, the decision is kept there. Every module call on the
tuner's thread runs as written (registry.bypass), so builds and timings call the real modules.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
from typing import Any

import torch

from aitune_ray.jit import registry
from aitune_ray.jit.cache import EAGER, TUNED, DecisionCache, call_signature, module_fingerprint
from aitune_ray.jit.config import config
from aitune_ray.jit.patched import ModuleState, PatchedModule
from aitune_ray.model.recording import ModuleState as WrapperState
from aitune_ray.runtime.device import module_device, resolve_device

logger = logging.getLogger(__name__)


class Tuner:
    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._executor = None
        self._own_executor = False
        self._lock = threading.Lock()
        self._pending = 0
        self.idle = threading.Event()
        self.idle.set()
        self.builds = 0   # tunings run (cache hits and dry runs not counted)

    # ----- where the work runs -------------------------------------------------------------------
    def submit(self, module: PatchedModule) -> None:
        with self._lock:
            self._pending += 1
            self.idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="aitune-ray-jit", daemon=True)
                self._thread.start()
        self._queue.put(module)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every module submitted so far has its verdict; False on timeout."""
        return self.idle.wait(timeout)

    def _loop(self) -> None:
        while True:
            module = self._queue.get()
            if module is None:
                return
            try:
                self.tune_now(module)
            except BaseException:  # noqa: BLE001 - the program goes on eagerly
                logger.exception("JIT tuning of %s stopped", module.fq_name)
            finally:
                with self._lock:
                    self._pending -= 1
                    if not self._pending:
                        self.idle.set()

    def close(self) -> None:
        """Stop the thread once its queue is done; close the executor it made if nothing runs."""
        if self._thread is not None:
            self._queue.put(None)
        if self._own_executor and self._executor is not None and self.idle.is_set():
            self._executor.close()
            self._executor = None

    # ----- deciding -----------------------------------------------------------------------------
    def tune_now(self, head: PatchedModule) -> None:
        """Decide head; where it stays eager, its recorded children next, each posted its verdict."""
        todo = [head]
        with registry.bypass():
            while todo:
                module = todo.pop()
                try:
                    state, backend, info = self._decide(module)
                except Exception as exc:  # noqa: BLE001 - a failed tuning keeps eager, children tried
                    logger.warning("JIT tuning of %s failed: %s: %s", module.fq_name, type(exc).__name__, exc)
                    state, backend, info = ModuleState.EAGER, None, f"failed: {type(exc).__name__}: {exc}"
                if state is ModuleState.EAGER:
                    for child in reversed(module.children):
                        if child.state is not ModuleState.RECORDING:
                            continue
                        child.allowed_to_tune = True
                        if len(child.samples):
                            child.state = ModuleState.TUNING
                            todo.append(child)
                        else:
                            child.frozen = False   # never called yet: it records, then is tuned
                module.post(state, backend, info)

    def _decide(self, module: PatchedModule) -> tuple[ModuleState, Any, str]:
        device = self.device_for(module)
        wrapper = self._wrapper(module)
        signatures = [call_signature(s.args, s.kwargs) for s in module.samples]
        fingerprint = module_fingerprint(module.__wrapped__, device)
        cache = DecisionCache(config.cache_dir, config.allow_native_code)
        cached = self._cached(cache, fingerprint, signatures, wrapper)
        if cached is not None:
            return cached
        if config.dry_run:
            logger.info("JIT dry run: %s would be tuned on %s (%d samples, batch sizes %s)", module.fq_name,
                        device, len(module.samples), module.samples.batch_sizes())
            return ModuleState.EAGER, None, "dry run"
        if config.detect_graph_breaks:
            with wrapper.unpatched() as plain:   # its own forward, not the wrapper's proxy
                breaks = graph_breaks(plain, module.samples.samples[0])
            if breaks:
                return ModuleState.EAGER, None, f"graph break ({breaks})"
        from aitune_ray.api.tuning import tune_modules

        self.builds += 1
        report = tune_modules([wrapper], device=device, executor=self.executor(device))
        if wrapper.state is WrapperState.TUNED:
            cache.store(fingerprint, wrapper, signatures, TUNED)
            return ModuleState.TUNED, wrapper.backend, wrapper.backend.describe()
        if report.failures:
            return ModuleState.EAGER, None, f"failed: {report.failures.get(wrapper.name, '')}"
        cache.store(fingerprint, wrapper, signatures, EAGER)
        return ModuleState.EAGER, None, _why_eager(wrapper)

    def start_from_cache(self, module: PatchedModule, args: tuple, kwargs: dict) -> bool:
        """On a module's first call: when the cache holds its decision for calls like this one, post it."""
        if config.cache_dir is None or config.dry_run:
            return False
        try:
            device = self.device_for(module)
            fingerprint = module_fingerprint(module.__wrapped__, device)
            cache = DecisionCache(config.cache_dir, config.allow_native_code)
            with registry.bypass():
                cached = self._cached(cache, fingerprint, [call_signature(args, kwargs)], None, module)
        except Exception as exc:  # noqa: BLE001 - the program's call goes on; the module is recorded instead
            logger.warning("JIT cache: %s not looked up (%s: %s)", module.fq_name, type(exc).__name__, exc)
            return False
        if cached is None:
            return False
        module.post(*cached)
        return True

    def _cached(self, cache: DecisionCache, fingerprint: str, signatures: list[str], wrapper,
                module: PatchedModule | None = None) -> tuple | None:
        decision = cache.lookup(fingerprint, signatures)
        if decision is None:
            return None
        if decision.get("verdict") == EAGER:
            return ModuleState.EAGER, None, "cached: eager"
        wrapper = wrapper if wrapper is not None else self._wrapper(module)
        if not cache.restore(fingerprint, wrapper) or wrapper.backend is None:
            return None
        logger.info("JIT: %s starts tuned from the cache (%s)", wrapper.name, wrapper.backend.describe())
        return ModuleState.TUNED, wrapper.backend, f"cached: {wrapper.backend.describe()}"

    @staticmethod
    def _wrapper(module: PatchedModule):
        from aitune_ray.api.module import Module

        strategy = copy.deepcopy(config.strategy) if config.strategy is not None else None
        wrapper = Module(module.__wrapped__, name=module.fq_name, strategy=strategy, max_samples=config.max_samples)
        wrapper.samples = module.samples
        module.wrapper = wrapper
        return wrapper

    @staticmethod
    def device_for(module: PatchedModule) -> torch.device:
        return resolve_device(config.device) if config.device is not None else module_device(module.__wrapped__)

    def executor(self, device: torch.device):
        """config.executor, opened once; by default Ray where it runs, else builds in a child process."""
        if self._executor is None:
            chosen = config.executor
            if chosen is None or isinstance(chosen, str):
                chosen, self._own_executor = _default_executor(device, chosen), True
            chosen.open()
            self._executor = chosen
        return self._executor


def _default_executor(device: torch.device, requested: str | None):
    from aitune_ray.executors.choice import RAY, choose_executor
    from aitune_ray.executors.inline import InlineExecutor

    choice = choose_executor(requested, device=str(device))
    logger.info("JIT: %s", choice.line())
    if choice.kind != RAY:
        return InlineExecutor(contain=True)
    from aitune_ray.cluster import RayExecutor

    return RayExecutor()


def _why_eager(wrapper) -> str:
    """The report's one-line answer (why eager is kept), or AITune's words where there is no report."""
    if wrapper.report is None:
        return "no better tuned version"
    from aitune_ray.report.answer import answer

    return answer(wrapper.report)


def graph_breaks(module: torch.nn.Module, sample) -> int:
    """How many times torch.compile's graph breaks in module's forward on sample (torch._dynamo.explain)."""
    import torch._dynamo

    explained = torch._dynamo.explain(module)(*sample.args, **sample.kwargs)
    return int(explained.graph_break_count)
