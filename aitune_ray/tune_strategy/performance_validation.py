"""The one decision rule: a candidate's speedup over eager, read with its confidence interval.

- A candidate wins when the lower bound of the interval of its speedup over the recorded call mix is at
  least 1 + min_speedup_ratio (AITune's 1.01x gate, read with its uncertainty).
- It loses when, at any recorded batch size, the whole interval lies below 1 - noise_tolerance.
- It is not faster when the whole mix interval lies below 1 + min_speedup_ratio.
- Otherwise the data do not decide. Before the last look the caller may measure more rounds (the
  strategies double them), but only for a candidate that could still pass (could_pass): one whose median
  speedup over the mix is at least the gate (or, where each batch size may get its own winner, its median
  at one size). More rounds narrow the interval around the median: they cannot lift a lower bound above a
  median that lies below the gate, unless the candidate's speed itself changes between the passes, which
  is drift, not evidence. Such a candidate is judged at once, as at the last look. At the last look the
  verdict is "inconclusive, eager kept" when the per-round spread (interquartile range over median) is
  above max_spread, else "not shown faster". Eager is kept either way, and the verdict says which.
"""

from __future__ import annotations

import dataclasses

from aitune_ray.measure.statistics import Interval, paired_interval, unpaired_interval
from aitune_ray.measure.timing import Timing
from aitune_ray.results import BuildResult

MAX_SPREAD = 0.10      # per-round IQR/median above which an undecided comparison is called inconclusive
CONFIDENCE = 0.95      # of the interval at the last look
INTERIM_CONFIDENCE = 0.99   # before it: a decision taken early must be surer, so that two looks together
                            # choose a candidate at the gate's edge hardly more often than one look would

WIN, LOSS, NOT_FASTER, UNDECIDED, INCONCLUSIVE, NOT_SHOWN, OFF = (
    "faster", "slower at a batch size", "not faster", "undecided", "inconclusive, eager kept",
    "not shown faster", "validation off")


@dataclasses.dataclass
class GateOutcome:
    passed: bool
    mix_speedup: float                  # median speedup over the recorded call mix
    speedups: dict[int, float]          # median speedup per batch size
    reason: str = ""
    verdict: str = ""                   # one of the words above
    decided: bool = True                # False: more rounds may decide (only before the last look)
    interval: Interval | None = None    # over the recorded mix
    intervals: dict[int, Interval] = dataclasses.field(default_factory=dict)
    detail: str = ""                    # the reason without the verdict's own words: the figures and why

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["intervals"] = {int(bs): i for bs, i in data["intervals"].items()}
        return data


def mix_time(timing_of, mix: dict[int, int]) -> float:
    """Total milliseconds to run the recorded call mix once (point medians: for screening only)."""
    return sum(count * timing_of(bs).median_ms for bs, count in mix.items())


def judge(eager: dict[int, list[float]], candidate: dict[int, list[float]], mix: dict[int, int], *,
          paired: bool, enabled: bool, min_speedup_ratio: float, noise_tolerance: float,
          max_spread: float = MAX_SPREAD, final: bool = True, confidence: float | None = None) -> GateOutcome:
    """Apply the decision rule to per-round (paired) or per-burst (unpaired) milliseconds per call.

    final: False for a look after which more rounds may come (then the interval is of INTERIM_CONFIDENCE
    and an undecided outcome says so); True for the last look (CONFIDENCE)."""
    if confidence is None:
        confidence = CONFIDENCE if final else INTERIM_CONFIDENCE
    interval_of = paired_interval if paired else unpaired_interval
    intervals = {bs: interval_of({bs: eager[bs]}, {bs: candidate[bs]}, {bs: 1}, confidence) for bs in mix}
    overall = interval_of(eager, candidate, mix, confidence)
    speedups = {bs: i.median for bs, i in intervals.items()}
    kind = "paired rounds" if paired else "unpaired bursts"

    def outcome(passed, verdict, reason, decided=True, words=""):
        detail = reason[len(words):] if words else reason
        return GateOutcome(passed, overall.median, speedups, reason, verdict, decided, overall, intervals, detail)

    if not enabled:
        return outcome(True, OFF, "performance validation off")
    gate = 1.0 + min_speedup_ratio
    floor = 1.0 - noise_tolerance
    losses = {bs: i for bs, i in intervals.items() if i.high < floor}
    if losses:
        wins = {bs: i for bs, i in intervals.items() if i.low >= gate}
        lose = ", ".join(f"bs {bs} ({i.text()})" for bs, i in sorted(losses.items()))
        win = ", ".join(f"bs {bs} ({i.text()})" for bs, i in sorted(wins.items()))
        prefix = f"wins at {win} but " if win else ""
        return outcome(False, LOSS, f"{prefix}slower than eager at {lose}, beyond the "
                                    f"{noise_tolerance:.0%} noise tolerance")
    where = f"{overall.text()} over the recorded mix, {overall.rounds} {kind}"
    if overall.low >= gate:
        return outcome(True, WIN, f"{where}: lower bound at least {gate:.3f}x")
    if overall.high < gate:
        return outcome(False, NOT_FASTER, f"{where}: needs {gate:.3f}x")
    if not final:
        return outcome(False, UNDECIDED, f"{where}: the interval includes {gate:.3f}x", decided=False)
    spread = max(overall.spread, max((i.spread for i in intervals.values()), default=0.0))
    if spread > max_spread:
        words = f"{INCONCLUSIVE}: "
        return outcome(False, INCONCLUSIVE, f"{words}{where}, the interval includes {gate:.3f}x and the per-round "
                                            f"spread (IQR/median {spread:.0%}) is over {max_spread:.0%}", words=words)
    words = f"{NOT_SHOWN}: "
    return outcome(False, NOT_SHOWN, f"{words}{where}, the interval includes {gate:.3f}x", words=words)


def judged_early(outcome: GateOutcome) -> GateOutcome:
    """outcome, judged at the last look on the first rounds because more could not make it pass, saying so."""
    note = "no more rounds taken: their median is below the gate, which more rounds could not lift"
    outcome.reason = f"{outcome.reason} ({note})"
    outcome.detail = f"{outcome.detail} ({note})" if outcome.detail else outcome.detail
    return outcome


def could_pass(outcome: GateOutcome, min_speedup_ratio: float, *, per_size: bool = False) -> bool:
    """Whether more rounds could make an undecided outcome pass: its median speedup over the recorded mix
    is at least 1 + min_speedup_ratio, or (per_size: each batch size may get its own winner) its median
    at one recorded batch size is."""
    gate = 1.0 + min_speedup_ratio
    if outcome.mix_speedup >= gate:
        return True
    return per_size and any(s >= gate for s in outcome.speedups.values())


def series(timings: dict[int, Timing] | dict[int, dict], mix: dict[int, int]) -> dict[int, list[float]]:
    """Per batch size, the per-round (or per-burst) milliseconds of timings (Timing or its dict)."""
    out = {}
    for bs in mix:
        t = timings[bs]
        out[bs] = (t if isinstance(t, Timing) else Timing.from_dict(t)).samples_ms()
    return out


def evaluate(result: BuildResult, baseline: dict[int, Timing], mix: dict[int, int], *, enabled: bool,
             min_speedup_ratio: float, noise_tolerance: float, paired: bool = False,
             final: bool = True) -> GateOutcome:
    """The rule for a result against baseline: paired when both come from one side-by-side measurement."""
    candidate = {bs: result.timing(bs) for bs in mix}
    return judge(series(baseline, mix), series(candidate, mix), mix, paired=paired, enabled=enabled,
                 min_speedup_ratio=min_speedup_ratio, noise_tolerance=noise_tolerance, final=final)
