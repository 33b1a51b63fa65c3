"""Latency measurement: warm up, then time until the spread is small or a budget is spent.

On a GPU, a call shorter than burst_ms is timed in bursts: CUDA events around several calls made back to
back, the time per call being the burst's time over its length. Host and GPU then overlap as they do in
a serving loop, and the launch latency and synchronization noise that dominate a single short call (tens
of microseconds, as much as the kernel itself) are spread over the burst. Calls of burst_ms or longer are
timed one at a time.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
import time
from typing import Callable

import torch


@dataclasses.dataclass
class MeasureConfig:
    """How long and how hard to measure one callable at one batch size."""

    warmup_runs: int = 3
    min_runs: int = 10
    max_runs: int = 200
    max_cv: float = 0.05           # stop once the coefficient of variation is below this
    max_seconds: float = 2.0       # time budget per batch size, warm-up excluded
    burst_ms: float = 1.0          # on a GPU, shorter calls are timed in back-to-back bursts this long
    max_burst: int = 64            # calls per burst at most

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "MeasureConfig":
        return cls(**data)


@dataclasses.dataclass
class Timing:
    """Latency statistics of one callable at one batch size."""

    batch_size: int
    median_ms: float
    p90_ms: float
    cv: float
    runs: int

    @property
    def throughput(self) -> float:
        """Samples per second at this batch size."""
        return self.batch_size / (self.median_ms / 1e3) if self.median_ms > 0 else float("inf")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Timing":
        return cls(**data)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_once(fn: Callable[[], object], device: torch.device, calls: int = 1) -> float:
    """Milliseconds per call over calls back-to-back calls (CUDA events on GPU, perf_counter elsewhere)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / calls
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) * 1e3 / calls


def burst_length(fn: Callable[[], object], device: torch.device, burst_ms: float = 1.0, max_burst: int = 64) -> int:
    """Calls per timed burst: 1 off the GPU or for calls of burst_ms or more, else enough to fill burst_ms."""
    if device.type != "cuda" or burst_ms <= 0 or max_burst <= 1:
        return 1
    single = _time_once(fn, device)
    if single >= burst_ms:   # a long call is not timed twice more
        return 1
    single = min(single, _time_once(fn, device), _time_once(fn, device))
    if single >= burst_ms:
        return 1
    return max(1, min(max_burst, math.ceil(burst_ms / max(single, 1e-3))))


def _stats(times: list[float], batch_size: int) -> Timing:
    median = statistics.median(times)
    mean = statistics.fmean(times)
    cv = statistics.pstdev(times) / mean if len(times) > 1 and mean > 0 else 0.0
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return Timing(batch_size, median, p90, cv, len(times))


def measure(fn: Callable[[], object], device: torch.device, batch_size: int,
            config: MeasureConfig | None = None) -> Timing:
    """Time fn() at one batch size under the stop rule of config."""
    cfg = config or MeasureConfig()
    with torch.no_grad():
        for _ in range(cfg.warmup_runs):
            fn()
        _sync(device)
        calls = burst_length(fn, device, cfg.burst_ms, cfg.max_burst)
        times: list[float] = []
        deadline = time.perf_counter() + cfg.max_seconds
        while len(times) < cfg.max_runs:
            times.append(_time_once(fn, device, calls))
            if len(times) >= cfg.min_runs:
                if _stats(times, batch_size).cv <= cfg.max_cv or time.perf_counter() > deadline:
                    break
    return _stats(times, batch_size)


def profile_samples(call: Callable, samples, device: torch.device,
                    config: MeasureConfig | None = None) -> dict[int, Timing]:
    """Time call(*args, **kwargs) at every recorded batch size, cycling through that size's samples."""
    timings: dict[int, Timing] = {}
    for bs in samples.batch_sizes():
        timings[bs] = measure(_cycling(call, [s for s in samples if s.batch_size == bs]), device, bs, config)
    return timings


def measure_interleaved(fns: dict[str, Callable[[], object]], device: torch.device, batch_size: int,
                        rounds: int = 30, warmup_runs: int = 3, burst_ms: float = 1.0,
                        max_burst: int = 64) -> dict[str, Timing]:
    """Time several callables in turn (A B C A B C ...) so that drift hits them alike. Each gets the
    same burst length (the one the fastest needs), so that all are timed alike."""
    with torch.no_grad():
        for fn in fns.values():
            for _ in range(warmup_runs):
                fn()
        _sync(device)
        calls = max((burst_length(fn, device, burst_ms, max_burst) for fn in fns.values()), default=1)
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                times[name].append(_time_once(fn, device, calls))
    return {name: _stats(t, batch_size) for name, t in times.items()}


def profile_side_by_side(calls: dict[str, Callable], samples, device: torch.device,
                         rounds: int = 30) -> dict[str, dict[int, Timing]]:
    """Time every call(*args, **kwargs) in turn (A B A B ...) at each recorded batch size, cycling through
    that size's samples: {name: {batch size: Timing}}."""
    timed: dict[str, dict[int, Timing]] = {name: {} for name in calls}
    for bs in samples.batch_sizes():
        group = [s for s in samples if s.batch_size == bs]
        fns = {name: _cycling(call, group) for name, call in calls.items()}
        for name, timing in measure_interleaved(fns, device, bs, rounds=rounds).items():
            timed[name][bs] = timing
    return timed


def _cycling(call: Callable, group: list) -> Callable[[], object]:
    cycle = itertools.cycle(group)

    def once():
        sample = next(cycle)
        return call(*sample.args, **sample.kwargs)

    return once
