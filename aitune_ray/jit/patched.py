"""PatchedModule: one nn.Module the JIT mode tracks (AITune's name), from its first call to its verdict.

A module's calls are recorded (its real inputs and eager outputs, as aitune_ray.Module records them) until it
is ready (JITConfig.min_samples; in deferred mode, after tune.deferred()); then it is tuned, on the tuner's
thread while its calls run eagerly, or on the calling thread with blocking=True. The verdict is posted to the
module and taken by its next call, on entry: a call runs wholly eager or wholly on the chosen backend.
A module whose tuning keeps eager (a graph break, no faster backend, a failure) leaves its children to be tried.
"""

from __future__ import annotations

import enum
import logging
import time
from typing import Any, ClassVar

import torch

from aitune_ray.jit import registry
from aitune_ray.jit.config import JITMode, config
from aitune_ray.model.samples import Sample, SampleStore, batch_size_of, check_recordable, detach_clone, describe

logger = logging.getLogger(__name__)


class ModuleState(enum.Enum):
    INIT = "init"            # not called yet: its place in the hierarchy is unknown
    RECORDING = "recording"  # calls run eagerly and are recorded
    TUNING = "tuning"        # being tuned; calls run eagerly
    TUNED = "tuned"          # calls go to the chosen backend
    EAGER = "eager"          # kept eager; its children may be tuned
    SKIPPED = "skipped"      # on skip_modules: neither it nor its children are tuned
    DETACHED = "detached"    # below a tuned or skipped module
    INSPECT = "inspect"      # INSPECT mode: calls are timed and described


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


class PatchedModule:
    """The JIT state of one nn.Module (__wrapped__). Its calls come through call()."""

    deferred_tuning_enabled: ClassVar[bool] = False
    attempted_tuning: ClassVar[bool] = False
    tuner: ClassVar[Any] = None   # the Tuner (aitune_ray.jit.tuner), set by the patcher

    def __init__(self, module: torch.nn.Module):
        self.__wrapped__ = module
        self.name = type(module).__name__
        self.fq_name = ""
        self.state = ModuleState.INIT
        self.level = -1
        self.parent: PatchedModule | None = None
        self.children: list[PatchedModule] = []
        self.allowed_to_tune = False
        self.frozen = False          # recording stopped: an ancestor's tuning reads the samples
        self.call_count = 0
        self.samples = SampleStore()
        self.info = ""               # the backend chosen, or why it stays eager
        self.backend = None          # the live backend of a TUNED module
        self.wrapper = None          # the aitune_ray.Module the tuner tunes (made by the tuner)
        self.switched_at_call = 0    # the call number that first ran on the backend (0: none yet)
        self._verdict: tuple | None = None
        self.seconds = 0.0           # INSPECT: time spent in its calls
        self.inputs: list = []       # INSPECT: the distinct input descriptions seen

    # ----- calls --------------------------------------------------------------------------------
    def call(self, args: tuple, kwargs: dict) -> Any:
        if self._verdict is not None:
            self._take_verdict()
        self.call_count += 1
        state = self.state
        if state is ModuleState.TUNED:
            return self._on_backend(args, kwargs)
        if state is ModuleState.INIT:
            return self._first_call(args, kwargs)
        if state is ModuleState.RECORDING and not self.frozen:
            return self._record(args, kwargs)
        if state is ModuleState.INSPECT:
            return self._inspect(args, kwargs)
        return self._run(args, kwargs)

    def _run(self, args: tuple, kwargs: dict) -> Any:
        """The module's own call; tracked modules first called below it become its children."""
        me = id(self.__wrapped__)
        inner, below = registry.inside(), registry.stack()
        inner.add(me)
        below.append(self)
        try:
            return self.__wrapped__(*args, **kwargs)
        finally:
            below.pop()
            inner.discard(me)

    def _on_backend(self, args: tuple, kwargs: dict) -> Any:
        """The chosen backend's call; a backend that calls the module itself (eager, Inductor) reaches its own
        forward."""
        me = id(self.__wrapped__)
        inner = registry.inside()
        inner.add(me)
        try:
            return self.backend.infer(*args, **kwargs)
        finally:
            inner.discard(me)

    def _first_call(self, args: tuple, kwargs: dict) -> Any:
        if count_parameters(self.__wrapped__) <= config.min_parameters:
            self._leave(ModuleState.SKIPPED, f"{config.min_parameters} parameters or fewer")
            return self._run(args, kwargs)
        below = registry.stack()
        parent = below[-1] if below else None
        if parent is not None:
            if parent.level + 1 >= config.max_depth_level:
                self._leave(ModuleState.DETACHED, "below max_depth_level")
                return self._run(args, kwargs)
            if parent.state in (ModuleState.SKIPPED, ModuleState.DETACHED, ModuleState.TUNED):
                self._leave(ModuleState.DETACHED, f"below a {parent.state.value} module")
                return self._run(args, kwargs)
            self.parent, self.level = parent, parent.level + 1
            parent.children.append(self)
            self.allowed_to_tune = parent.state is ModuleState.EAGER
            self.fq_name = f"{parent.fq_name}.{self.name}"
        else:
            self.level, self.allowed_to_tune, self.fq_name = 0, True, self.name
            registry.heads.append(self)
        self.fq_name = _unique(self.fq_name)
        registry.note(f"new module {self.fq_name} (level {self.level})")
        if config.mode is JITMode.INSPECT:
            self.state = ModuleState.INSPECT
            return self._inspect(args, kwargs)
        if type(self.__wrapped__).__name__ in config.skip_modules:
            self.state = ModuleState.SKIPPED
            self.info = "on skip_modules"
            registry.note(f"{self.fq_name} is on skip_modules")
            return self._run(args, kwargs)   # stays tracked so that its children know they are skipped
        self.state = ModuleState.RECORDING
        if self.allowed_to_tune and self.tuner is not None and self.tuner.start_from_cache(self, args, kwargs):
            return self._after_cache(args, kwargs)
        return self._record(args, kwargs)

    def _after_cache(self, args: tuple, kwargs: dict) -> Any:
        self.call_count -= 1   # call() counts it again
        return self.call(args, kwargs)

    def _record(self, args: tuple, kwargs: dict) -> Any:
        self.samples.calls_seen += 1
        if len(self.samples) >= config.max_samples:
            outputs = self._run(args, kwargs)
            if self.ready():
                self.start_tuning()
            return outputs
        try:
            check_recordable((args, kwargs), "input")
        except TypeError as exc:
            self._keep_eager(f"inputs cannot be recorded: {exc}")
            return self._run(args, kwargs)
        inputs = detach_clone((args, kwargs))
        outputs = self._run(args, kwargs)
        try:
            check_recordable(outputs, "output")
        except TypeError as exc:
            self._keep_eager(f"outputs cannot be recorded: {exc}")
            return outputs
        self.samples.samples.append(Sample(inputs[0], inputs[1], detach_clone(outputs), batch_size_of(args, kwargs)))
        if self.ready():
            self.start_tuning()
        return outputs

    def _inspect(self, args: tuple, kwargs: dict) -> Any:
        seen = {"args": describe(args), "kwargs": describe(kwargs)}
        if seen not in self.inputs and len(self.inputs) < 16:
            self.inputs.append(seen)
        synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        synchronize()
        start = time.perf_counter()
        try:
            return self._run(args, kwargs)
        finally:
            synchronize()
            self.seconds += time.perf_counter() - start

    # ----- tuning -------------------------------------------------------------------------------
    def ready(self) -> bool:
        """Whether the module may be tuned now (AITune's rules for each mode)."""
        if not self.allowed_to_tune or self.state is not ModuleState.RECORDING or not len(self.samples):
            return False
        if config.mode is JITMode.TUNE_DEFERRED:
            return PatchedModule.deferred_tuning_enabled
        if config.mode is not JITMode.TUNE_EAGER or len(self.samples) < config.min_samples:
            return False
        if config.min_samples > 1 and config.batch_axis_required:
            return len(self.samples.batch_sizes()) > 1
        return True

    def start_tuning(self) -> None:
        PatchedModule.attempted_tuning = True
        self.state = ModuleState.TUNING
        for below in self.descendants():
            below.frozen = True
        registry.note(f"tuning {self.fq_name} ({len(self.samples)} samples, batch sizes "
                      f"{self.samples.batch_sizes()})")
        if config.blocking:
            self.tuner.tune_now(self)
            self._take_verdict()
        else:
            self.tuner.submit(self)

    def post(self, state: ModuleState, backend: Any = None, info: str = "") -> None:
        """The tuner's verdict; the module's next call takes it (a plain assignment: one reference)."""
        self._verdict = (state, backend, info)

    def _take_verdict(self) -> None:
        verdict, self._verdict = self._verdict, None
        state, backend, self.info = verdict
        if state is ModuleState.TUNED:
            self.backend, self.state = backend, ModuleState.TUNED
            self.switched_at_call = self.call_count + 1
            for below in self.descendants():
                below.state = ModuleState.DETACHED
                registry.untrack(below)
            registry.note(f"{self.fq_name} tuned: {self.info}")
        else:
            self.state = state
            registry.note(f"{self.fq_name} stays {state.value}: {self.info}")

    def _keep_eager(self, reason: str) -> None:
        """This module cannot be tuned: its children may be, once they are ready."""
        self.state, self.info = ModuleState.EAGER, reason
        registry.note(f"{self.fq_name} stays eager: {reason}")
        for child in self.children:
            child.allowed_to_tune = True

    def _leave(self, state: ModuleState, reason: str) -> None:
        self.state, self.info = state, reason
        registry.untrack(self)

    def descendants(self) -> list["PatchedModule"]:
        found, todo = [], list(self.children)
        while todo:
            current = todo.pop()
            found.append(current)
            todo.extend(current.children)
        return found

    # ----- reports ------------------------------------------------------------------------------
    def describe(self) -> dict:
        cls = type(self.__wrapped__)
        return {"module": self.fq_name or self.name, "class": f"{cls.__module__}.{cls.__qualname__}",
                "state": self.state.value, "level": self.level, "calls": self.call_count,
                "parameters": count_parameters(self.__wrapped__), "samples": len(self.samples),
                "batch_sizes": self.samples.batch_sizes(), "info": self.info,
                "seconds": round(self.seconds, 6), "inputs": self.inputs,
                "children": [c.fq_name for c in self.children]}

    def __repr__(self) -> str:
        extra = f" ({self.info})" if self.info else ""
        return f"{self.fq_name or self.name} level={self.level} state={self.state.value}{extra} calls={self.call_count}"

    @staticmethod
    def hierarchy() -> list[str]:
        lines = []

        def walk(module: PatchedModule, depth: int) -> None:
            lines.append(f"{'  ' * depth}- {module!r}")
            for child in module.children:
                walk(child, depth + 1)

        for head in registry.heads:
            walk(head, 0)
        return lines or ["no modules in the hierarchy"]

    @staticmethod
    def print_hierarchy(sink=logger.info) -> None:
        """The hierarchy of tracked modules, one line each, to sink (default: this module's logger)."""
        sink("JIT tuning hierarchy:\n" + "\n".join(PatchedModule.hierarchy()))

    @staticmethod
    def print_history(sink=logger.info) -> None:
        sink("\n".join(registry.history))

    @staticmethod
    def reset() -> None:
        registry.clear()
        _NAMES.clear()
        PatchedModule.deferred_tuning_enabled = False
        PatchedModule.attempted_tuning = False


_NAMES: dict[str, int] = {}


def _unique(name: str) -> str:
    count = _NAMES.get(name, 0)
    _NAMES[name] = count + 1
    return f"{name}.{count}" if count else name

