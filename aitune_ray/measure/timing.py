"""Timing as a serving loop runs: bursts of back-to-back calls between two device-wide synchronizes.

Every timed sample is a burst: one device-wide synchronize, a wall-clock read, calls made back to back,
a second device-wide synchronize and a second read; the time per call is the burst's time over its
length. Host and device then overlap as in a serving loop, and the synchronize (cudaDeviceSynchronize:
every stream of the device, so also the streams of ONNX Runtime and TensorRT) drains all the work the
calls queued. Timing one call at a time with CUDA events measures something else for a host-bound call:
the launch latency of an empty queue, not what a loop of calls sees.

Burst length. On a GPU a burst lasts at least burst_ms (50 ms) and holds at least min_burst (3) calls:
the first call of a burst starts on an empty queue and the last one's kernels drain after the host is
done, a ramp of tens of microseconds to a few milliseconds that 50 ms spreads below noise, and the
two synchronizes and clock reads (~10 us) fall below 0.1%. A long call (20 ms or more) needs only
min_burst calls. Measured on an H200 (docs/measurement.md, a CUDA-graph ViT-B at
batch 8 and 32): 10 ms bursts read it about 3% slower than 50 ms ones (the ramp); 50 and 200 ms agree
within 1%; a user's loop of 400 back-to-back calls reads the GPU-bound batch 32 about 2% slower than
either, with the SM clock 1.5-2% lower under that sustained load. On the CPU calls are synchronous, so a
burst only averages the timer and scheduler noise: cpu_burst_ms (5 ms) is enough, and a call of 5 ms or
more is timed alone.

Sustained load. A serving loop keeps the GPU busy at one batch size for seconds, and the GPU lowers its
SM clock under that load; a compute-bound candidate (one CUDA graph, no gaps) slows with the clock more
than host-bound eager does. So the side-by-side rounds run one recorded batch size at a time, all its
rounds back to back, after settle_ms (1 s) of untimed load: the callables in turn, a burst each. On the
H200, rounds that alternated batch sizes read a CUDA-graph ViT-B at batch 32 at 1950-1960 MHz and 2-3%
faster than a user's loop of 100 calls (1930 MHz) did, with eager alike in both: the tuner's speedup at
that size read 3.5-5% above the user's in every run. Run this way, the candidate read 3.14-3.26 ms per
call at batch 32 in both harnesses (benchmarks/README.md). The CPU's clock does not follow load that way,
and cpu_settle_ms is 0.

Measuring cost: a 9-candidate job re-measured side by side (eager + 9 finalists, 2 batch sizes, 30
rounds of 50 ms bursts) spends 10 x 2 x 30 x 50 ms = 30 s timing, plus 2 x 1 s settling, twice that
when the decision needs the doubled round count.

CUDA events are read around one extra burst as a cross-check (Timing.event_ms), never to decide.
Single-call latency (one call between two synchronizes) is measured separately and reported as
latency, never as throughput. Recompiles while timing (torch.compile recompiling under a guard
failure) are detected, the burst is timed again and the count is kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import random
import statistics
import time
from typing import Callable, Iterator

import torch

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class MeasureConfig:
    """How long and how hard to measure one callable at one batch size."""

    warmup_runs: int = 3
    min_runs: int = 10
    max_runs: int = 200
    max_cv: float = 0.05           # stop once the coefficient of variation is below this
    max_seconds: float = 2.0       # time budget per batch size, warm-up excluded
    burst_ms: float = 50.0         # on a GPU, every timed burst of back-to-back calls lasts at least this
    max_burst: int = 10_000        # calls per burst at most
    min_burst: int = 3             # on a GPU, calls per burst at least
    cpu_burst_ms: float = 5.0      # on the CPU, bursts last at least this (a longer call is timed alone)
    settle_ms: float = 1000.0      # on a GPU, untimed load before the side-by-side rounds of each batch size
    cpu_settle_ms: float = 0.0     # on the CPU, untimed load before those rounds (its clock does not follow load)
    latency_runs: int = 10         # single calls timed for the latency p50/p90 (0: none)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "MeasureConfig":
        return cls(**data)

    def burst_target(self, device: torch.device) -> tuple[float, int]:
        """(milliseconds a burst lasts at least, calls it holds at least) on this device."""
        if torch.device(device).type == "cpu":
            return self.cpu_burst_ms, 1
        return self.burst_ms, self.min_burst

    def settle_target(self, device: torch.device) -> float:
        """Milliseconds of untimed load before the side-by-side rounds of one batch size, on this device."""
        return self.cpu_settle_ms if torch.device(device).type == "cpu" else self.settle_ms


@dataclasses.dataclass
class Timing:
    """Time per call of one callable at one batch size, from serving-loop bursts.

    median_ms / p90_ms / cv: over the bursts (time per call). rounds_ms: every burst's time per call in
    the order taken; from a side-by-side measurement, entry i is round i, paired with entry i of every
    other callable of that measurement. latency_*: single calls between two synchronizes (None: not
    measured). event_ms: CUDA-event time per call of one burst, a cross-check (None off the GPU)."""

    batch_size: int
    median_ms: float
    p90_ms: float
    cv: float
    runs: int
    rounds_ms: list = dataclasses.field(default_factory=list)
    calls_per_burst: int = 1
    recompiles: int = 0
    latency_p50_ms: float | None = None
    latency_p90_ms: float | None = None
    event_ms: float | None = None

    @property
    def throughput(self) -> float:
        """Samples per second at this batch size."""
        return self.batch_size / (self.median_ms / 1e3) if self.median_ms > 0 else float("inf")

    def samples_ms(self) -> list[float]:
        """The per-burst times, or the median alone for a timing that kept none."""
        return list(self.rounds_ms) or [self.median_ms]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Timing":
        return cls(**data)


# ----- the clock -------------------------------------------------------------------------------

_clock: Callable[[], float] = time.perf_counter


def clock_in_use() -> Callable[[], float] | None:
    """The clock use_clock() set, or None for the real one (time.perf_counter): what a process that measures
    for this one (a contained build, aitune_ray.executors.build_process) must read too."""
    return None if _clock is time.perf_counter else _clock


@contextlib.contextmanager
def use_clock(clock: Callable[[], float]) -> Iterator[None]:
    """Read bursts with clock (seconds) instead of time.perf_counter: for simulated timing in tests."""
    global _clock
    previous, _clock = _clock, clock
    try:
        yield
    finally:
        _clock = previous


def _sync(device: torch.device) -> None:
    """Device-wide: waits for every stream of the device, whichever library queued the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_once(fn: Callable[[], object], device: torch.device, calls: int = 1) -> float:
    """Milliseconds per call over calls back-to-back calls, between two device-wide synchronizes."""
    _sync(device)
    t0 = _clock()
    for _ in range(calls):
        fn()
    _sync(device)
    return (_clock() - t0) * 1e3 / calls


def _event_ms(fn: Callable[[], object], device: torch.device, calls: int) -> float | None:
    """CUDA-event time per call of one burst (a cross-check of the wall clock; None off the GPU)."""
    if device.type != "cuda":
        return None
    _sync(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    _sync(device)
    return float(start.elapsed_time(end)) / calls


def _compiles() -> int:
    """Frames torch.compile has compiled so far in this process (a change while timing is a recompile)."""
    try:
        from torch._dynamo.utils import counters
    except Exception:   # pragma: no cover - a torch without Dynamo
        return 0
    return int(counters["frames"].get("total", 0))


def _timed_burst(fn: Callable[[], object], device: torch.device, calls: int, retries: int = 2) -> tuple[float, int]:
    """(ms per call, recompiles seen): a burst that recompiled is timed again, up to retries times."""
    seen = 0
    while True:
        before = _compiles()
        ms = _time_once(fn, device, calls)
        if _compiles() == before or seen >= retries:
            return ms, seen
        seen += 1


def burst_length(fn: Callable[[], object], device: torch.device, burst_ms: float = 50.0,
                 max_burst: int = 10_000, min_burst: int = 3) -> int:
    """Calls per burst: enough back-to-back calls to last burst_ms, at least min_burst (1 when burst_ms is 0).

    One call gives a first estimate; a call shorter than the burst is estimated again from a short burst,
    since back-to-back calls overlap host and device and take less than one call alone."""
    if burst_ms <= 0 or max_burst <= 1:
        return 1
    single = _time_once(fn, device)
    if single * max(min_burst, 1) >= burst_ms:   # a long call is not timed twice more
        return max(1, min(min_burst, max_burst))
    probe = max(min_burst, min(max_burst, math.ceil(burst_ms / 4 / max(single, 1e-4))))
    per_call = _time_once(fn, device, probe)
    return max(min_burst, 1, min(max_burst, math.ceil(burst_ms / max(per_call, 1e-4))))


def summary(times: list[float], batch_size: int) -> Timing:
    """A Timing of per-burst (or per-round) milliseconds per call, in the order taken."""
    return _stats(times, batch_size)


def _stats(times: list[float], batch_size: int) -> Timing:
    median = statistics.median(times)
    mean = statistics.fmean(times)
    cv = statistics.pstdev(times) / mean if len(times) > 1 and mean > 0 else 0.0
    return Timing(batch_size, median, _p90(times), cv, len(times), rounds_ms=list(times))


def _p90(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def _warm(fn: Callable[[], object], device: torch.device, runs: int) -> None:
    for _ in range(runs):
        fn()
    _sync(device)


def _settle(fns: dict[str, Callable[[], object]], lengths: dict[str, int], device: torch.device,
            settle_ms: float) -> None:
    """Untimed load for at least settle_ms: the callables in turn, a burst of each, as the rounds will run
    them, so that the GPU's clock has settled where a serving loop's runs."""
    if settle_ms <= 0:
        return
    _sync(device)
    end = _clock() + settle_ms / 1e3
    while _clock() < end:
        for name, fn in fns.items():
            for _ in range(lengths[name]):
                fn()
    _sync(device)


def measure(fn: Callable[[], object], device: torch.device, batch_size: int,
            config: MeasureConfig | None = None) -> Timing:
    """Time fn() at one batch size under the stop rule of config, then its single-call latency."""
    cfg = config or MeasureConfig()
    target_ms, min_calls = cfg.burst_target(device)
    with torch.no_grad():
        _warm(fn, device, cfg.warmup_runs)
        calls = burst_length(fn, device, target_ms, cfg.max_burst, min_calls)
        times: list[float] = []
        recompiles = 0
        deadline = time.perf_counter() + cfg.max_seconds
        while len(times) < cfg.max_runs:
            ms, seen = _timed_burst(fn, device, calls)
            times.append(ms)
            recompiles += seen
            if len(times) >= cfg.min_runs:
                if _stats(times, batch_size).cv <= cfg.max_cv or time.perf_counter() > deadline:
                    break
        timing = _stats(times, batch_size)
        timing.calls_per_burst, timing.recompiles = calls, recompiles
        if cfg.latency_runs > 0:
            single = [_time_once(fn, device, 1) for _ in range(cfg.latency_runs)]
            timing.latency_p50_ms, timing.latency_p90_ms = statistics.median(single), _p90(single)
        timing.event_ms = _event_ms(fn, device, calls)
    if recompiles:
        logger.warning("%d recompile(s) while timing batch size %d: those bursts were timed again",
                       recompiles, batch_size)
    return timing


def see_every_size(calls: dict[str, Callable], samples, device: torch.device) -> None:
    """Call each callable once on one sample of every recorded batch size, before any of them is timed.

    A backend that compiles lazily (torch.compile restored from its recipe, which compiles at its first
    calls) then serves every size with the graphs it keeps once it has seen them all. With automatic
    dynamic shapes, torch.compile compiles the first batch size it sees with that size fixed, and the
    second with a dynamic batch dimension; from then on the newer, dynamic graph serves every size. Timed
    one size at a time from a fresh start, such a backend would run its first size on the static graph,
    which it then gives up for good: a speed it will not have when deployed."""
    with torch.no_grad():
        for bs in samples.batch_sizes():
            sample = samples.first_of_batch_size(bs)
            for call in calls.values():
                call(*sample.args, **sample.kwargs)
    _sync(device)


def profile_samples(call: Callable, samples, device: torch.device,
                    config: MeasureConfig | None = None) -> dict[int, Timing]:
    """Time call(*args, **kwargs) at every recorded batch size, cycling through that size's samples (each
    size seen once first, see see_every_size)."""
    see_every_size({"call": call}, samples, device)
    timings: dict[int, Timing] = {}
    for bs in samples.batch_sizes():
        timings[bs] = measure(_cycling(call, [s for s in samples if s.batch_size == bs]), device, bs, config)
    return timings


def profile_side_by_side(calls: dict[str, Callable], samples, device: torch.device, rounds: int = 30,
                         config: MeasureConfig | None = None, seed: int = 0,
                         mix: bool = False) -> dict[str, dict[int, Timing]]:
    """Paired, interleaved rounds: {name: {batch size: Timing}} whose rounds_ms are paired by index.

    Every call first sees every recorded batch size once (see_every_size: a backend restored from its
    recipe then serves each size as it will when deployed). Then one recorded batch size at a time, as a
    serving loop runs it: each call is warmed up and times as many calls per burst as the first, then settle_ms of untimed
    load (the module docstring says why), then the rounds, back to back. Every round times every call once,
    in an order shuffled anew for each round (seeded: the same seed gives the same orders), so that drift
    and periodic interference hit them alike and each round is a paired comparison. Each call cycles
    through that size's samples.

    mix (with more than one batch size): one more group, MIX, whose call is one pass over every recorded
    call in the order recorded, sizes interleaved, as a serving loop makes them: the figure over the recorded
    calls is measured, not composed from the sizes' own (switching sizes has costs of its own, and not the
    same for eager and a compiled candidate)."""
    cfg = config or MeasureConfig()
    see_every_size(calls, samples, device)
    sizes = samples.batch_sizes()
    groups = {bs: {name: _cycling(call, [s for s in samples if s.batch_size == bs]) for name, call in calls.items()}
              for bs in sizes}
    if mix and len(sizes) > 1:
        groups[MIX] = {name: _pass(call, list(samples)) for name, call in calls.items()}
    return paired_rounds(groups, device, rounds, cfg, seed)


#: The group of a side-by-side session that times one pass over every recorded call in the order recorded
#: (profile_side_by_side's mix): not a batch size.
MIX = -1


#: In side-by-side rounds, a callable up to this many times slower than the baseline times as many calls per
#: burst as the baseline does (paired_rounds).
SAME_WORK_LIMIT = 4


def paired_rounds(groups: dict, device: torch.device, rounds: int, config: MeasureConfig | None = None,
                  seed: int = 0) -> dict[str, dict]:
    """Paired, shuffled rounds of several callables, one group at a time: {name: {group: Timing}} whose
    rounds_ms are paired by index. groups: group key (a batch size, a recorded shape) -> {name: fn()}, every
    group with the same names, the baseline first. Per group: each fn warmed up, the baseline's calls per burst
    for every fn (its own for one over SAME_WORK_LIMIT times slower), settle_ms of untimed load, then the rounds
    back to back, each timing every fn once in an order shuffled anew (seeded), all from this thread."""
    cfg = config or MeasureConfig()
    target_ms, min_calls = cfg.burst_target(device)
    order_rng = random.Random(seed)
    names = list(next(iter(groups.values())))
    times = {name: {g: [] for g in groups} for name in names}
    recompiles = {name: {g: 0 for g in groups} for name in names}
    lengths = {}
    with torch.no_grad():
        for g, fns in groups.items():
            for name, fn in fns.items():
                _warm(fn, device, cfg.warmup_runs)
            # Every callable times as many calls per burst as the first (the baseline): each round then times
            # the same work for each, and a burst's chance of holding a preemption does not differ between
            # them. Only a callable over SAME_WORK_LIMIT times slower than the baseline gets bursts of its own
            # length (equal work would make its bursts that much longer). Each estimate is the longest of
            # three, so that one slow estimate (a scheduler's hiccup) cannot give bursts of a call or two.
            for name, fn in fns.items():
                own = max(burst_length(fn, device, target_ms, cfg.max_burst, min_calls) for _ in range(3))
                base = lengths.get((names[0], g), own)
                lengths[(name, g)] = base if own * SAME_WORK_LIMIT >= base else own
            _settle(fns, {name: lengths[(name, g)] for name in names}, device, cfg.settle_target(device))
            for _ in range(rounds):
                order = list(names)
                order_rng.shuffle(order)
                for name in order:
                    ms, seen = _timed_burst(fns[name], device, lengths[(name, g)])
                    times[name][g].append(ms)
                    recompiles[name][g] += seen
    out: dict[str, dict] = {}
    for name in names:
        out[name] = {}
        for g in groups:
            timing = _stats(times[name][g], g if isinstance(g, int) else 0)
            timing.calls_per_burst, timing.recompiles = lengths[(name, g)], recompiles[name][g]
            out[name][g] = timing
            if timing.recompiles:
                logger.warning("%s recompiled %d time(s) while timed side by side at %s", name, timing.recompiles, g)
    return out


def _pass(call: Callable, samples: list) -> Callable[[], object]:
    def once():
        out = None
        for sample in samples:
            out = call(*sample.args, **sample.kwargs)
        return out

    return once


def _cycling(call: Callable, group: list) -> Callable[[], object]:
    cycle = itertools.cycle(group)

    def once():
        sample = next(cycle)
        return call(*sample.args, **sample.kwargs)

    return once
