"""MaxThroughputStrategy: build and profile every backend, keep the fastest one that beats eager."""

from __future__ import annotations

import logging

from aitune_ray.tune_strategy.performance_validation import mix_time
from aitune_ray.tune_strategy.tune_strategy import TuneStrategy

logger = logging.getLogger(__name__)


class MaxThroughputStrategy(TuneStrategy):
    """remeasure_margin: finalists within this fraction of the best are re-timed side by side with eager
    on one device before the choice (by executors that re-measure: inline and Ray both do)."""

    overlap_baseline = True   # eager is timed again beside the finalists before the decision

    def __init__(self, backends, *, remeasure_margin: float = 0.10, **kwargs):
        super().__init__(backends, **kwargs)
        self.remeasure_margin = remeasure_margin

    def jobs(self):
        """Every candidate is built anyway, so the order is free: costly builds first (longest-first
        scheduling), which keeps one late long build from finishing alone on a parallel executor."""
        by_key = {b.key(): b.cost_hint() for b in self.backends}
        return sorted(super().jobs(), key=lambda job: (-by_key[job.key], job.priority))

    def _release_out_of_reach(self, context, executor, report, released: set[str]) -> None:
        """Builds slower than the best so far by more than remeasure_margin can no longer be finalists
        (the best only gets faster): their memory goes back now instead of at the decision."""
        mix = report.call_mix
        times = {r.key: mix_time(r.timing, mix) for r in report.results if r.ok}
        if not times:
            return
        best = min(times.values())
        for r in report.results:
            if r.key in times and r.key not in released and times[r.key] > best * (1 + self.remeasure_margin):
                released.add(r.key)
                executor.release(context, r)

    def _decide(self, context, executor, handle, baseline, report) -> None:
        released: set[str] = set()
        for result in handle:
            report.results.append(result)
            self._release_out_of_reach(context, executor, report, released)
        ok = [r for r in report.results if r.ok]
        if not ok:
            report.decision = "kept eager: no backend built correctly (" + "; ".join(
                f"{r.backend}: {r.status}" for r in report.results) + ")"
            return
        mix = report.call_mix
        best = min(mix_time(r.timing, mix) for r in ok)
        finalists = [r for r in ok if mix_time(r.timing, mix) <= best * (1 + self.remeasure_margin)]
        new_baseline = executor.remeasure(context, finalists, baseline)
        if new_baseline:
            baseline = new_baseline
            report.remeasured_baseline = {bs: t.to_dict() for bs, t in new_baseline.items()}
        passed = []
        for r in ok:
            if self._record_gate(report, r, baseline).passed:
                passed.append(r)
        if not passed:
            report.decision = "kept eager: no backend beat eager (" + "; ".join(
                f"{r.backend}: {report.notes[r.key]}" for r in ok) + ")"
            return
        winner = max(passed, key=lambda r: report.speedups[r.key])
        report.chosen = winner.key
        report.decision = (f"chose {winner.backend}, fastest of {len(passed)} that passed: "
                           f"{report.notes[winner.key]}")
