"""The accept rule, for every choice: a candidate's paired per-round speedup over eager, with its interval.

For each of K candidates judged on one session, at two-sided confidence 1 - alpha/K (Bonferroni):
- superiority over the recorded call mix: the lower bound of the median per-round speedup over the mix is
  at least 1 + min_speedup_ratio;
- non-inferiority at every recorded batch size: the lower bound there is at least 1 - noise_tolerance.
A candidate is accepted when both hold. Each lower bound is a one-sided bound at 1 - alpha/(2K): a candidate
whose true speedup is under the gate is accepted with probability at most alpha/(2K), so that any of K such
candidates is, with probability at most alpha/2 (2.5% at the default alpha of 0.05).

The intervals are the distribution-free order-statistic intervals of the median of paired per-round ratios
(aitune_ray.measure.statistics): exact in coverage whatever the noise's shape, as long as rounds are
independent and each round pairs eager and the candidate moments apart.

The A/A check: eager called through the candidates' path (a TorchEagerBackend, restored and wrapped like
them) must read 1 within noise_tolerance, over the mix and at every batch size, at the same confidence;
else whatever moves a callable's speed by the path it is called through (the thread, its OpenMP team, a
wrapper) is larger than the effects being judged, and the host is unfit to decide on.
"""

from __future__ import annotations

import dataclasses

from aitune_ray.decision.verdict import FASTER, INCONCLUSIVE, NOT_FASTER, SLOWER, Judgement
from aitune_ray.errors import ConfigError
from aitune_ray.measure.statistics import paired_interval
from aitune_ray.measure.timing import MIX

Series = dict[int, list[float]]   # batch size -> milliseconds per call, one entry per round


@dataclasses.dataclass
class Rule:
    """min_speedup_ratio: the gate over the mix is 1 + this. noise_tolerance: no batch size may have a lower
    bound under 1 - this (and the A/A control must read 1 within it). alpha: the familywise error, split
    over the candidates judged in one session. enabled: False turns performance validation off.
    spread_tolerance: the A/A guard on eager's own spread: eager against itself round by round (the control's
    time over eager's in the same round, a ratio that drift common to both cancels out of); where, at some
    batch size, the tenth-highest of those ratios (p90) is more than 1 + this times the tenth-lowest (p10),
    the host moved the two calls of one round apart by more than any effect it could resolve, and it is unfit
    (10% independent timing noise per call gives about 0.45; 50-microsecond calls on a 2-core host under a
    load average of 18 gave 1.9; the README's main job with 2 torch threads on that host under a load average
    of 25 gave 2200 to 3500, its OpenMP team waiting on descheduled threads)."""

    min_speedup_ratio: float = 0.01
    noise_tolerance: float = 0.03
    alpha: float = 0.05
    enabled: bool = True
    spread_tolerance: float = 9.0

    def settings(self) -> dict:
        """The rule's three settings, as plain data (a spec carries them to the kernel forge)."""
        return {"min_speedup_ratio": self.min_speedup_ratio, "noise_tolerance": self.noise_tolerance,
                "alpha": self.alpha}

    @classmethod
    def from_settings(cls, data: dict | None) -> "Rule":
        """The rule of settings() (None or {}: the defaults); always enabled."""
        data = dict(data or {})
        values = {k: data[k] for k in ("min_speedup_ratio", "noise_tolerance", "alpha") if k in data}
        bad = [k for k, v in values.items() if isinstance(v, bool) or not isinstance(v, (int, float))]
        if bad:
            raise ConfigError(f"the rule's {', '.join(bad)} must be numbers, got {', '.join(repr(values[k]) for k in bad)}")
        return cls(**{k: float(v) for k, v in values.items()})

    def confidence(self, judged: int) -> float:
        """The two-sided confidence of every interval of a session that judges this many candidates."""
        return 1.0 - self.alpha / max(1, judged)

    @property
    def gate(self) -> float:
        return 1.0 + self.min_speedup_ratio

    @property
    def floor(self) -> float:
        return 1.0 - self.noise_tolerance


def intervals(eager: Series, candidate: Series, mix: dict[int, int], confidence: float):
    """(over the mix, {batch size: interval}) of the paired per-round speedup of candidate over eager. Over the
    mix: from the passes over the recorded calls in their order (the MIX group) where both were timed so,
    else composed from the sizes' rounds, each size weighted by its calls."""
    sizes = [bs for bs in mix if mix[bs] > 0]
    n = min(len(eager[bs]) for bs in sizes)
    n = min([n] + [len(candidate[bs]) for bs in sizes])
    e = {bs: list(eager[bs][:n]) for bs in sizes}
    c = {bs: list(candidate[bs][:n]) for bs in sizes}
    per = {bs: paired_interval({bs: e[bs]}, {bs: c[bs]}, {bs: 1}, confidence) for bs in sizes}
    if len(sizes) > 1 and eager.get(MIX) and candidate.get(MIX):
        m = min(len(eager[MIX]), len(candidate[MIX]))
        overall = paired_interval({MIX: eager[MIX][:m]}, {MIX: candidate[MIX][:m]}, {MIX: 1}, confidence)
    else:
        overall = paired_interval(e, c, {bs: mix[bs] for bs in sizes}, confidence)
    return overall, per


def judge(key: str, eager: Series, candidate: Series, mix: dict[int, int], rule: Rule, judged: int) -> Judgement:
    """The accept rule on candidate's rounds against eager's rounds of the same session (paired by index)."""
    overall, per = intervals(eager, candidate, mix, rule.confidence(judged))
    below = sorted(bs for bs, i in per.items() if i.low < rule.floor)
    spread = max([overall.spread] + [i.spread for i in per.values()])
    if overall.low >= rule.gate and not below:
        kind = FASTER
    elif any(i.high < rule.floor for i in per.values()):
        kind = SLOWER
    elif overall.high < rule.gate:
        kind = NOT_FASTER
    else:
        kind = INCONCLUSIVE
    return Judgement(key, kind == FASTER, kind, overall.to_dict(), {bs: i.to_dict() for bs, i in per.items()},
                     below, spread)


#: Rounds per batch size below which the A/A guard does not speak: with fewer, its p10 and p90 are the
#: extremes, and one preempted round would make a healthy host unfit.
SPREAD_MIN_ROUNDS = 20


def eager_spread(eager: Series, control: Series) -> tuple[float, int | None]:
    """(eager's largest spread against itself within the session: p90 / p10 - 1 of control / eager round by
    round at one batch size or over the recorded calls' passes (MIX); where). (0, None) where no group has
    SPREAD_MIN_ROUNDS rounds."""
    worst, where = 0.0, None
    for bs, rounds in eager.items():
        ordered = sorted(c / e for e, c in zip(rounds, control.get(bs, [])) if e > 0)
        if len(ordered) < SPREAD_MIN_ROUNDS or ordered[0] <= 0:
            continue
        low = ordered[int(round(0.1 * (len(ordered) - 1)))]
        high = ordered[int(round(0.9 * (len(ordered) - 1)))]
        spread = high / low - 1 if low > 0 else 0.0
        if spread > worst:
            worst, where = spread, bs
    return worst, where


def control_fits(control: Judgement, rule: Rule) -> bool:
    """Whether the A/A control's intervals (eager through the candidates' path) contain 1 within the
    tolerance, over the mix and at every batch size."""
    def fits(i: dict) -> bool:
        return i["low"] <= 1.0 + rule.noise_tolerance and i["high"] >= 1.0 - rule.noise_tolerance

    return fits(control.interval) and all(fits(i) for i in control.intervals.values())
