"""The run folder's executor wrapper passes the whole Executor seam on: builds are released with a run folder
as without one (CPU, a simulated clock, held buffers counted, no RSS)."""

from __future__ import annotations

import dataclasses
import gc
import inspect
import weakref

import pytest
import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.backend import Backend, BackendConfig
from aitune_ray.worker.seam import Executor
from aitune_ray.measure import timing
from aitune_ray.measure.timing import MeasureConfig
from aitune_ray.executors.run_dir import JournalingExecutor


class Clock:
    """Seconds that pass only when a simulated call sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()


class Buffer:
    """What a built candidate holds (a quantized copy, a session, a loaded package): counted while alive."""

    alive: "weakref.WeakSet[Buffer]" = weakref.WeakSet()
    peak = 0

    def __init__(self):
        self.data = torch.ones(16)
        Buffer.alive.add(self)
        gc.collect()   # what is only garbage is not held: the count is of buffers something still references
        Buffer.peak = max(Buffer.peak, len(Buffer.alive))

    @classmethod
    def reset(cls) -> None:
        gc.collect()
        cls.alive, cls.peak = weakref.WeakSet(), 0


@dataclasses.dataclass
class HoardingConfig(BackendConfig):
    ms: float = 1.0
    tag: int = 0


class HoardingBackend(Backend):
    """Correct (y = 2x + 1) in ms simulated milliseconds per call, holding a Buffer once built."""

    config_class = HoardingConfig

    def _build(self, module, samples, device, workdir):
        self._buffer = Buffer()

    def _infer(self, x):
        CLOCK.now += self.config.ms / 1e3
        return x * 2 + 1


class Affine(nn.Module):
    def forward(self, x):
        CLOCK.now += 2e-3
        return x * 2 + 1


def peak_held(count: int, run_dir=None) -> int:
    """Tune with count candidates of distinct speeds (each 25% slower than the one before, more than the
    re-measure margin apart); the most buffers held at once during the tuning."""
    Buffer.reset()
    backends = [HoardingBackend(HoardingConfig(ms=1.0 + 0.25 * i, tag=i)) for i in range(count)]
    measure = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=5)
    # one finalist: then what is held is that one and the build under way, however many candidates
    strategy = ait.MaxThroughputStrategy(backends, measure_config=measure,
                                         max_finalists=1).enable_performance_validation(False)
    module = ait.Module(Affine(), "affine", strategy=strategy)
    with timing.use_clock(CLOCK), ait.InlineExecutor(remeasure_rounds=3) as executor:
        ait.tune(module, [torch.randn(4, 8) for _ in range(2)], device="cpu", executor=executor, run_dir=run_dir,
                 call_as_given=True)
    assert module.report.chosen_result().spec["config"]["tag"] == 0   # the fastest won, so every build ran
    return Buffer.peak


def test_with_a_run_folder_builds_are_released_as_without_one(tmp_path):
    without = {count: peak_held(count) for count in (2, 8)}
    assert without[8] == without[2]                                  # flat in the number of candidates
    with_folder = {count: peak_held(count, run_dir=tmp_path / f"run{count}") for count in (2, 8)}
    assert with_folder == without


class Recording(Executor):
    """An executor that records which of its members were reached."""

    concurrent_modules = True

    def __init__(self):
        self.calls: list[str] = []
        self.progress = None

    def __getattribute__(self, name):
        value = object.__getattribute__(self, name)
        if inspect.ismethod(value) and not name.startswith("_"):
            object.__getattribute__(self, "calls").append(name)
        return value

    def baseline(self, context):
        return {}

    def submit(self, context, jobs):
        raise AssertionError("not used here")

    def materialize(self, context, result):
        raise AssertionError("not used here")


def test_the_wrapper_defines_every_member_of_the_executor_seam():
    seam = {name for name in vars(Executor) if not name.startswith("_")}
    missing = sorted(seam - set(vars(JournalingExecutor)))
    assert not missing, f"JournalingExecutor leaves these to Executor's defaults: {missing}"


def test_optional_members_reach_the_inner_executor(tmp_path):
    from aitune_ray.executors.run_dir import journaled

    inner = Recording()
    wrapper = journaled(inner, tmp_path / "run")
    events = []
    wrapper.progress = events.append
    assert inner.progress is wrapper.progress
    assert wrapper.concurrent_modules is True
    wrapper.release(None, None)
    wrapper.discard(None)
    assert inner.calls[-2:] == ["release", "discard"]
    context = type("Context", (), {"name": "m"})()
    record = wrapper.emit(context, "queued")
    assert events == [record] and record["module"] == "m"
    with pytest.raises(AssertionError, match="not used"):
        wrapper.materialize(None, None)
