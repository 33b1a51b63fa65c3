"""Speedup with its uncertainty: the confidence interval of the median paired speedup over rounds.

Paired rounds (a side-by-side measurement): round i timed eager and the candidate moments apart, so the
per-round ratio eager_ms[i] / candidate_ms[i] cancels what drifts between rounds. Over a call mix the
ratio of round i is the mix's eager time over its candidate time, both summed over the recorded batch
sizes weighted by their call counts. The interval of the median of those ratios is the distribution-free
one from order statistics: the median of n rounds lies between the j-th smallest and j-th largest ratio
with a probability given by the binomial(n, 1/2) distribution, whatever the noise's shape. It is what a
bootstrap over rounds approximates, exact in its coverage and free of resampling cost.

Only paired rounds decide (aitune_ray.decision): timings taken apart, at different moments or on different
devices, are never compared.
"""

from __future__ import annotations

import dataclasses
import math

import torch


@dataclasses.dataclass
class Interval:
    """A speedup (eager time / candidate time) and its confidence interval.

    spread: interquartile range over median of the per-round ratios."""

    median: float
    low: float
    high: float
    rounds: int
    paired: bool
    spread: float = 0.0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Interval":
        return cls(**data)

    def text(self) -> str:
        return f"{self.median:.3f}x [{self.low:.3f}, {self.high:.3f}]"


def _mix_sums(series: dict[int, list[float]], weights: dict[int, int]) -> torch.Tensor:
    """Per round: the call mix's time, sum over batch sizes of count x time per call."""
    return sum(float(weights[bs]) * torch.tensor(series[bs], dtype=torch.float64) for bs in weights)


def per_round_ratios(eager: dict[int, list[float]], candidate: dict[int, list[float]],
                     weights: dict[int, int]) -> list[float]:
    """Paired rounds: eager mix time over candidate mix time, one ratio per round."""
    return (_mix_sums(eager, weights) / _mix_sums(candidate, weights)).tolist()


def _median(values: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The median as statistics.median takes it (mean of the two middle values for an even count)."""
    ordered = values.sort(dim=dim).values
    n = ordered.shape[dim]
    lo, hi = ordered.select(dim, (n - 1) // 2), ordered.select(dim, n // 2)
    return (lo + hi) / 2


def spread_of(values: list[float]) -> float:
    """Interquartile range over median."""
    t = torch.tensor(values, dtype=torch.float64)
    q1, med, q3 = torch.quantile(t, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)).tolist()
    return (q3 - q1) / med if med > 0 else math.inf


def median_rank(n: int, confidence: float) -> int:
    """The largest j (1-based) with P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2; 0 when n is too small
    for any interval of that confidence (then the interval is the whole range of the data)."""
    alpha = (1.0 - confidence) / 2
    cumulative, j = 0.0, 0
    for k in range(n + 1):
        cumulative += math.comb(n, k) / 2.0 ** n       # P(B <= k)
        if cumulative > alpha:
            break
        j = k + 1
    return j


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free confidence interval of the median of values."""
    ordered = sorted(values)
    n = len(ordered)
    point = float(_median(torch.tensor(ordered, dtype=torch.float64)))
    j = median_rank(n, confidence)
    if j < 1:
        return point, ordered[0], ordered[-1]
    return point, min(ordered[j - 1], point), max(ordered[n - j], point)


def paired_interval(eager: dict[int, list[float]], candidate: dict[int, list[float]], weights: dict[int, int],
                    confidence: float = 0.95) -> Interval:
    """Interval of the median per-round speedup over the mix given by weights."""
    ratios = per_round_ratios(eager, candidate, weights)
    point, low, high = median_interval(ratios, confidence)
    return Interval(point, low, high, len(ratios), True, spread_of(ratios) if len(ratios) > 1 else 0.0)
