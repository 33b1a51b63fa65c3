"""Simulated time: a module and backends of known, noisy speed.

They "sleep" on SIM_CLOCK, a clock that only moves when a call advances it, and draw their noise from
seeded generators: a tuning under aitune_ray.measure.timing.use_clock(SIM_CLOCK) comes out the same on any
machine under any load. A SimBackend with buffer_bytes > 0 holds a simulated buffer of that size while it
is built: LIVE_BUFFERS counts the bytes held now and the peak, per process.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import threading
import weakref
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend import Backend, BackendConfig
from aitune_ray.model.samples import SampleStore

SIM_CALLS: collections.Counter = collections.Counter()     # "infer:<tag>:<batch size>" -> calls


class SimClock:
    """Seconds that pass only when sleep() is called. slowness: the host's state, by which every simulated
    call takes longer (1.0: as configured)."""

    def __init__(self):
        self.now = 0.0
        self.slowness = 1.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)

    def __reduce__(self):
        """Pickled as the receiving process's own SIM_CLOCK, set to this one's time and slowness: the clock that
        the simulated calls there advance (a copy of it would never move)."""
        return _shared_clock, (self.now, self.slowness)


def _shared_clock(now: float, slowness: float) -> SimClock:
    SIM_CLOCK.now, SIM_CLOCK.slowness = now, slowness
    return SIM_CLOCK


SIM_CLOCK = SimClock()


class BufferRegistry:
    """Bytes of simulated buffers alive in this process, now and at the peak since the last reset()."""

    def __init__(self):
        self._lock = threading.Lock()
        self.held = 0
        self.peak = 0

    def hold(self, owner: object, nbytes: int) -> None:
        with self._lock:
            self.held += nbytes
            self.peak = max(self.peak, self.held)
        weakref.finalize(owner, self._drop, nbytes)

    def _drop(self, nbytes: int) -> None:
        with self._lock:
            self.held -= nbytes

    def reset(self) -> None:
        with self._lock:
            self.peak = self.held


LIVE_BUFFERS = BufferRegistry()


def reset() -> None:
    """Forget calls, the host's state and the buffer peak (between tests)."""
    SIM_CALLS.clear()
    SIM_CLOCK.slowness = 1.0
    LIVE_BUFFERS.reset()


def _ms_at(ms: float, ms_by_bs: dict, batch_size: int) -> float:
    return float({int(k): v for k, v in ms_by_bs.items()}.get(batch_size, ms))


def _noisy(rng: random.Random, ms: float, noise: float) -> float:
    return ms * max(0.05, 1.0 + rng.gauss(0.0, noise))


class SimAffine(nn.Module):
    """y = 2x + 1, taking ms (or ms_by_bs[batch size]) simulated milliseconds with relative noise."""

    def __init__(self, ms: float = 2.0, ms_by_bs: dict | None = None, noise: float = 0.1, seed: int = 0):
        super().__init__()
        self.ms, self.ms_by_bs, self.noise = ms, dict(ms_by_bs or {}), noise
        self.rng = random.Random(seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SIM_CALLS[f"infer:eager:{x.shape[0]}"] += 1
        ms = _noisy(self.rng, _ms_at(self.ms, self.ms_by_bs, x.shape[0]), self.noise) * SIM_CLOCK.slowness
        SIM_CLOCK.sleep(ms / 1e3)
        return x * 2 + 1


@dataclasses.dataclass
class SimConfig(BackendConfig):
    """ms / ms_by_bs: simulated milliseconds per call (by batch size); noise: relative, seeded by seed.
    restored_extra_ms: added to every call once the backend was restored from its recipe (as after a
    deployment elsewhere, or a checkpoint load): what was measured is then not what runs.
    slowness_from_build: the host's state changes to this as this backend is built (0: it does not).
    buffer_bytes: a simulated buffer this backend holds while built (LIVE_BUFFERS counts it)."""

    tag: str = "sim"
    ms: float = 1.0
    ms_by_bs: dict = dataclasses.field(default_factory=dict)
    noise: float = 0.1
    seed: int = 1
    restored_extra_ms: float = 0.0
    slowness_from_build: float = 0.0
    buffer_bytes: int = 0


class _Buffer:
    """A stand-in for a build's memory: LIVE_BUFFERS counts it until it is garbage."""

    def __init__(self, nbytes: int):
        LIVE_BUFFERS.hold(self, nbytes)


class SimBackend(Backend):
    config_class = SimConfig
    is_jit = True

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        self.restored = not len(samples)      # a JIT restore rebuilds without samples
        if self.config.slowness_from_build and not self.restored:
            SIM_CLOCK.slowness = self.config.slowness_from_build
        self.rng = random.Random(self.config.seed)
        self.buffer = _Buffer(self.config.buffer_bytes) if self.config.buffer_bytes else None

    def _infer(self, x: torch.Tensor) -> Any:
        cfg = self.config
        SIM_CALLS[f"infer:{cfg.tag}:{x.shape[0]}"] += 1
        ms = _noisy(self.rng, _ms_at(cfg.ms, cfg.ms_by_bs, x.shape[0]), cfg.noise)
        SIM_CLOCK.sleep((ms * SIM_CLOCK.slowness + (cfg.restored_extra_ms if self.restored else 0.0)) / 1e3)
        return x * 2 + 1


def sim(tag: str, **values) -> SimBackend:
    return SimBackend(SimConfig(tag=tag, **values))
