"""Performance validation: a candidate must beat eager over the recorded mix, and lose at no batch size."""

from __future__ import annotations

import dataclasses

from aitune_ray.measure.timing import Timing
from aitune_ray.results import BuildResult


@dataclasses.dataclass
class GateOutcome:
    passed: bool
    mix_speedup: float                  # eager time / candidate time over the recorded call mix
    speedups: dict[int, float]          # per batch size
    reason: str = ""


def mix_time(timing_of, mix: dict[int, int]) -> float:
    """Total milliseconds to run the recorded call mix once."""
    return sum(count * timing_of(bs).median_ms for bs, count in mix.items())


def evaluate(result: BuildResult, baseline: dict[int, Timing], mix: dict[int, int], *, enabled: bool,
             min_speedup_ratio: float, noise_tolerance: float) -> GateOutcome:
    """Compare a profiled candidate with eager at each recorded batch size and over the mix."""
    speedups = {bs: baseline[bs].median_ms / result.timing(bs).median_ms for bs in mix}
    mix_speedup = mix_time(baseline.__getitem__, mix) / mix_time(result.timing, mix)
    if not enabled:
        return GateOutcome(True, mix_speedup, speedups, "performance validation off")
    losses = {bs: s for bs, s in speedups.items() if s < 1.0 - noise_tolerance}
    wins = {bs: s for bs, s in speedups.items() if s >= 1.0 + min_speedup_ratio}
    if losses:
        lose = ", ".join(f"bs {bs} ({s:.2f}x)" for bs, s in sorted(losses.items()))
        win = ", ".join(f"bs {bs} ({s:.2f}x)" for bs, s in sorted(wins.items()))
        prefix = f"wins at {win} but " if win else ""
        return GateOutcome(False, mix_speedup, speedups, f"{prefix}slower than eager at {lose}")
    if mix_speedup < 1.0 + min_speedup_ratio:
        return GateOutcome(False, mix_speedup, speedups,
                           f"{mix_speedup:.3f}x over the recorded mix, needs {1.0 + min_speedup_ratio:.3f}x")
    return GateOutcome(True, mix_speedup, speedups, f"{mix_speedup:.2f}x over the recorded mix")
