"""What the winner maximizes among the candidates the accept rule accepts: a strategy's policy over the
procedure, never a rule of its own. Acceptance (faster than eager) is always the rule's (rule.py); an
objective only ranks the accepted candidates and, for a latency budget, says which of them may win.

Every figure is read from the confirm session's rounds (one device, one moment), like the rule's:
- SPEEDUP (MaxThroughput, the default): the median paired speedup over the recorded call mix.
- LATENCY (MinLatency): the lowest latency at the smallest recorded batch size, where latency is the
  median, over the session's rounds, of the candidate's time per call (ms) at that batch size.
- BUDGET (LatencyBudget): the highest throughput (batch size / time per call, samples/s) at any recorded
  batch size whose latency, read as above, is at most latency_budget_ms; a candidate within the budget at
  no recorded batch size may not win.

Screening ranks by the paired speedup over the mix, or for LATENCY at the smallest recorded batch size:
ratios paired on one device, never raw times from different devices or moments.
"""

from __future__ import annotations

import dataclasses
import statistics

SPEEDUP, LATENCY, BUDGET = "speedup", "latency", "budget"


@dataclasses.dataclass(frozen=True)
class Objective:
    kind: str = SPEEDUP
    latency_budget_ms: float | None = None

    def __post_init__(self):
        if self.kind not in (SPEEDUP, LATENCY, BUDGET):
            raise ValueError(f"unknown objective {self.kind!r}")
        if (self.kind == BUDGET) != (self.latency_budget_ms is not None):
            raise ValueError("a latency budget goes with the budget objective, and only with it")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def screen_mix(self, mix: dict[int, int]) -> dict[int, int]:
        """The mix screening ranks candidates on."""
        if self.kind == LATENCY:
            return {smallest(mix): 1}
        return dict(mix)

    def figures(self, rounds: dict[int, list[float]], mix: dict[int, int]) -> dict:
        """The objective's figures of one callable's session rounds (batch size -> ms per call by round):
        LATENCY: batch_size, latency_ms. BUDGET: latency_ms by batch size, and the batch size, latency_ms and
        throughput of the best one within the budget (batch_size None: none is). SPEEDUP: none."""
        if self.kind == SPEEDUP:
            return {}
        latency = {bs: statistics.median(rounds[bs]) for bs in sorted(mix) if mix[bs] > 0 and rounds.get(bs)}
        if self.kind == LATENCY:
            bs = smallest(mix)
            return {"batch_size": bs, "latency_ms": latency.get(bs)}
        within = {bs: ms for bs, ms in latency.items() if ms <= self.latency_budget_ms}
        out = {"latency_by_bs": [[bs, ms] for bs, ms in latency.items()], "batch_size": None, "latency_ms": None,
               "throughput": None}
        if within:
            bs = max(within, key=lambda b: (throughput(b, within[b]), -b))
            out.update(batch_size=bs, latency_ms=within[bs], throughput=throughput(bs, within[bs]))
        return out

    def eligible(self, figures: dict) -> bool:
        """Whether a candidate with these figures may win (BUDGET: within the budget at some batch size)."""
        if self.kind == BUDGET:
            return figures.get("batch_size") is not None
        if self.kind == LATENCY:
            return figures.get("latency_ms") is not None
        return True

    def score(self, figures: dict, median_speedup: float) -> float:
        """Higher is better, among eligible candidates."""
        if self.kind == LATENCY:
            return -float(figures["latency_ms"])
        if self.kind == BUDGET:
            return float(figures["throughput"])
        return median_speedup


def smallest(mix: dict[int, int]) -> int:
    """The smallest recorded batch size (with calls)."""
    return min(bs for bs, n in mix.items() if n > 0)


def throughput(batch_size: int, ms: float) -> float:
    """Samples per second at batch_size, at ms per call."""
    return batch_size * 1e3 / ms if ms > 0 else float("inf")
