"""Tiny models and user-defined backends shared by the CPU tests.

Strategies rebuild every backend from its spec (class path + config) before building it, so the
backends here keep all their knobs in HelperConfig and count what they do in the module-level
CALLS counter (keyed "build:<tag>" and "infer:<tag>") rather than on the instance.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from aitune_ray.backend import Backend, BackendConfig
from aitune_ray.measure.timing import MeasureConfig
from aitune_ray.model.samples import SampleStore

#: Fast measurement for tests: a handful of runs, at most 0.2 s per batch size.
FAST_MEASURE = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=20, max_seconds=0.2)

@contextlib.contextmanager
def thread_settings():
    """Torch's thread count, Inductor's compile threads and their environment variable, put back after a
    warm-up (aitune_ray.runtime.warm_up) changed them. Yields torch._inductor.config."""
    import torch._inductor.config as inductor_config

    saved = torch.get_num_threads(), inductor_config.compile_threads, os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")
    try:
        yield inductor_config
    finally:
        torch.set_num_threads(saved[0])
        inductor_config.compile_threads = saved[1]
        if saved[2] is None:
            os.environ.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
        else:
            os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = saved[2]


#: What the helper backends did, by "build:<tag>" / "infer:<tag>".
CALLS: collections.Counter = collections.Counter()


def reset_calls() -> None:
    CALLS.clear()


# ----- models ---------------------------------------------------------------------------------


class SleepyAffine(nn.Module):
    """y = x * scale + bias, after sleeping delay_s: an eager module that is slow on purpose."""

    def __init__(self, delay_s: float = 0.01, scale: float = 2.0, bias: float = 1.0):
        super().__init__()
        self.delay_s = delay_s
        self.scale = scale
        self.bias = bias
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        time.sleep(self.delay_s)
        return x * self.scale + self.bias


class MLP(nn.Module):
    """Linear-GELU-Linear, the one small real model of the backend tests."""

    def __init__(self, width: int = 32, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.fc1 = nn.Linear(width, width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(width, width)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class NestedIO(nn.Module):
    """Takes positional, nested and keyword inputs with plain values; returns a nested structure."""

    def __init__(self):
        super().__init__()
        self.seen: list = []

    def forward(self, x, pair, *, extras, scale=1.0, tag="t"):
        self.seen.append((tag, scale))
        a, (b, c) = pair[0], pair[1]
        total = x * scale + a + b * c + extras["w"]
        return {"total": total, "parts": (a.sum(), [extras["n"] * 2]), "tag": tag}


# ----- user backends ----------------------------------------------------------------------------


class HelperBuildFailure(RuntimeError):
    """The user backend's own exception type, raised by FailingBackend._build."""


@dataclasses.dataclass
class HelperConfig(BackendConfig):
    """tag: names the backend in CALLS (and makes its key unique).
    delay_s: seconds slept in every _infer call.
    large_delay_s / large_from: at batch sizes >= large_from, sleep large_delay_s instead.
    offset: added to the correct output (0: exact)."""

    tag: str = "helper"
    delay_s: float = 0.0
    large_delay_s: float | None = None
    large_from: int = 0
    offset: float = 0.0


class _HelperBackend(Backend):
    config_class = HelperConfig
    is_jit = True

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        CALLS[f"build:{self.config.tag}"] += 1
        # The "compiled" form: SleepyAffine's arithmetic without its sleep.
        self._scale = module.scale
        self._bias = module.bias

    def _sleep_for(self, x: torch.Tensor) -> float:
        cfg = self.config
        if cfg.large_delay_s is not None and x.dim() > 0 and x.shape[0] >= cfg.large_from:
            return cfg.large_delay_s
        return cfg.delay_s

    def _infer(self, x: torch.Tensor) -> Any:
        CALLS[f"infer:{self.config.tag}"] += 1
        delay = self._sleep_for(x)
        if delay:
            time.sleep(delay)
        return x * self._scale + self._bias + self.config.offset


class FastBackend(_HelperBackend):
    """Same result as SleepyAffine, computed without the sleep (or with a shorter one)."""


class SlowBackend(_HelperBackend):
    """Correct but slower than eager: give it a delay_s above the eager module's."""


class WrongBackend(_HelperBackend):
    """Fast, but its outputs are off by config.offset (default 0.5)."""

    def __init__(self, config: HelperConfig | None = None):
        super().__init__(config or HelperConfig(tag="wrong", offset=0.5))


class FailingBackend(_HelperBackend):
    """Raises HelperBuildFailure while building."""

    def _build(self, module, samples, device, workdir) -> None:
        CALLS[f"build:{self.config.tag}"] += 1
        raise HelperBuildFailure(f"{self.config.tag} cannot build this module")


class SkewedBackend(_HelperBackend):
    """Fast at large batches, slow at small ones (set delay_s, large_delay_s and large_from)."""


def helper(cls: type, tag: str, **values) -> Backend:
    """A helper backend with a tagged config, e.g. helper(SlowBackend, "slow", delay_s=0.03)."""
    return cls(HelperConfig(tag=tag, **values))


@pytest.fixture(autouse=True)
def fresh_counters(monkeypatch):
    """In-process builds, and call counters that start at zero (autouse where imported)."""
    monkeypatch.setenv("AITUNE_RAY_EXECUTOR", "inline")
    reset_calls()
    yield
    reset_calls()
