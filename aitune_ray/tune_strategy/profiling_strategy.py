"""ProfilingStrategy: every candidate built, screened and the best confirmed in one session; the accept rule
decides which are faster than eager, and the strategy's objective (aitune_ray.decision.objective) which of
those wins. MaxThroughput, MinLatency and LatencyBudget are its policies (AITune's ProfilingTuneStrategy)."""

from __future__ import annotations

from aitune_ray.decision import Objective, Verdict, shortlist
from aitune_ray.records.results import BuildResult
from aitune_ray.tune_strategy.tune_strategy import TuneStrategy, failures_text


class ProfilingStrategy(TuneStrategy):
    """Every candidate is built and screened; the max_finalists best by screening are confirmed in one
    session, and the accepted one best by objective() wins. Builds that fall out of the finalists are
    released as soon as they do, so that what is held does not grow with the candidates."""

    #: A batch-size dispatch may be composed (MaxThroughput's option; the speedup objective only).
    dispatch_by_batch_size = False

    def objective(self) -> Objective:
        """What the winner maximizes among the accepted candidates (default: the median speedup over the mix)."""
        return Objective()

    def jobs(self, context=None):
        """Every candidate is built anyway, so the order is free: costly builds first (longest-first
        scheduling), which keeps one late long build from finishing alone on a parallel executor."""
        by_key = {b.key(): b.cost_hint() for b in self.backends}
        return sorted(super().jobs(context), key=lambda job: (-by_key[job.key], job.priority))

    def _decide(self, context, executor, handle, report) -> None:
        held: set[str] = set()
        for result in handle:
            report.results.append(result)
            if result.ok:
                held.add(result.key)
                held = self._release_beyond_finalists(context, executor, report, held)
        ok = [r for r in report.results if r.ok]
        if not ok:
            report.decision = "kept eager: no backend built correctly (" + failures_text(report.results) + ")"
            return
        verdict = self._verdict(context, executor, report, ok, max_finalists=self.max_finalists,
                                dispatch=self.dispatch_by_batch_size, objective=self.objective())
        self._take(context, report, ok, verdict)

    def _take(self, context, report, ok: list[BuildResult], verdict: Verdict) -> None:
        """What the strategy does with the verdict beyond recording it (already in report)."""

    def _release_beyond_finalists(self, context, executor, report, held: set[str]) -> set[str]:
        """Release every held build that screening leaves out of the finalists so far (one left out cannot
        come back: later candidates only add better ones). Returns the builds still held."""
        results = {r.key: r for r in report.results if r.key in held}
        finalists, _, _ = shortlist({k: r.screen for k, r in results.items()},
                                    self.objective().screen_mix(report.call_mix), self.max_finalists,
                                    order=list(results), prune_slower=self.performance_validation)
        for key in held - set(finalists):
            executor.release(context, results[key])
        return set(finalists)
