"""The typed verdict of one decision, as plain data (to_dict/from_dict) for the report and the checkpoint.

The words that explain a verdict live in aitune_ray.report.verdict; here are only its kind and figures."""

from __future__ import annotations

import dataclasses

# What a candidate's judgement, or the whole decision, comes to.
FASTER = "faster"                    # accepted: superior over the mix, non-inferior at every batch size
NOT_FASTER = "not faster"            # shown below the gate over the mix, or slower than eager at a batch size
SLOWER = "slower at a batch size"    # a candidate's judgement: wholly below 1 - tolerance at a batch size
INCONCLUSIVE = "inconclusive"        # the data do not show it faster (and safe at every size), nor not
HOST_UNFIT = "host unfit"            # the A/A control did not read 1: the host could not measure
CONFIRM_FAILED = "confirm failed"    # the confirm session did not run: nothing is decided on other numbers
NO_CANDIDATE = "no candidate"        # nothing built, was correct and survived screening
VALIDATION_OFF = "validation off"    # performance validation off: the fastest that ran is taken unjudged
OVER_BUDGET = "over budget"          # no finalist meets the latency budget (decision.objective)

DISPATCH = "dispatch"                # Verdict.chosen of a batch-size dispatch (its routes say to what)


@dataclasses.dataclass
class Judgement:
    """The accept rule on one callable of a confirm session against eager.

    interval: the median per-round speedup over the recorded mix with its interval (Interval.to_dict());
    intervals: the same at each batch size; below: batch sizes whose lower bound is under 1 - tolerance
    (not shown non-inferior there); spread: the largest per-round IQR/median, over the mix or at a size."""

    key: str
    accepted: bool
    kind: str
    interval: dict
    intervals: dict[int, dict]
    below: list[int] = dataclasses.field(default_factory=list)
    spread: float = 0.0

    @property
    def median(self) -> float:
        return float(self.interval["median"])

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Judgement":
        data = dict(data)
        data["intervals"] = {int(bs): i for bs, i in data.get("intervals", {}).items()}
        return cls(**data)


@dataclasses.dataclass
class Verdict:
    """One decision. chosen: the winning key, DISPATCH (then routes: batch size -> key or None for eager),
    or None for eager. kind: one of the words above. confidence: the two-sided confidence of every interval
    of the session (1 - alpha/K); finalists: K, the number of finalists confirmed (the Bonferroni divisor).
    judgements: key -> Judgement of every finalist (and the composite "dispatch"); control: the A/A
    control's. screened: key -> the screening interval (plain dict) of every candidate screened; pruned:
    key -> why it did not reach the confirm session. where: the device the session ran on; why: the
    failure of a session that failed, the reason eager was kept where no judgement says it. objective: what the
    winner maximized (decision.objective.Objective.to_dict()); figures: key (and "eager") -> its objective's
    figures in the session (latency, throughput within a budget), empty for the speedup objective."""

    chosen: str | None
    kind: str
    confidence: float = 0.0
    finalists: int = 0
    rounds: int = 0
    judgements: dict[str, Judgement] = dataclasses.field(default_factory=dict)
    control: Judgement | None = None
    routes: dict[int, str | None] = dataclasses.field(default_factory=dict)
    screened: dict[str, dict] = dataclasses.field(default_factory=dict)
    pruned: dict[str, str] = dataclasses.field(default_factory=dict)
    where: str = ""
    why: str = ""
    min_speedup_ratio: float = 0.01
    noise_tolerance: float = 0.03
    objective: dict = dataclasses.field(default_factory=dict)
    figures: dict[str, dict] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["routes"] = {int(bs): k for bs, k in self.routes.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Verdict":
        data = dict(data)
        data["judgements"] = {k: Judgement.from_dict(j) for k, j in (data.get("judgements") or {}).items()}
        data["control"] = Judgement.from_dict(data["control"]) if data.get("control") else None
        data["routes"] = {int(bs): k for bs, k in (data.get("routes") or {}).items()}
        return cls(**data)

    def spread(self) -> float:
        """The largest per-round spread of the finalists' judgements (how noisy the session was)."""
        return max((j.spread for j in self.judgements.values()), default=0.0)
