"""FirstWinsStrategy: the first backend, in the given order, that builds, is correct and is accepted."""

from __future__ import annotations

from aitune_ray.report.verdict import diagnostic_failed_text, unmeasured_text
from aitune_ray.tune_strategy.tune_strategy import TuneStrategy, failures_text
from aitune_ray.tune_strategy.validation_mode import PerformanceValidationMode


class FirstWinsStrategy(TuneStrategy):
    """Try backends in priority order, each confirmed alone and accepted or not by the decision procedure.
    A parallel executor builds ahead speculatively; the decision still follows the order, and what is left is
    cancelled as soon as a candidate is accepted. With performance validation DIAGNOSTIC or DISABLED, the
    first that builds correctly is taken (DIAGNOSTIC confirms it beside eager for the report first)."""

    def _decide(self, context, executor, handle, report) -> None:
        order = [job.key for job in self.jobs()]
        done, failed, said = {}, [], []
        for result in handle:
            done[result.key] = result
            report.results.append(result)
            while order and order[0] in done:
                head = done[order.pop(0)]
                if not head.ok:
                    failed.append(head)
                    continue
                if self.performance_validation_mode is PerformanceValidationMode.DISABLED:
                    report.chosen, report.notes[head.key] = head.key, unmeasured_text()
                    report.decision = f"chose {head.backend}, the first that built correctly: {unmeasured_text()}"
                    handle.cancel()
                    return
                # each candidate is one more chance of a false win: K counts every candidate it may confirm
                verdict = self._verdict(context, executor, report, [head], max_finalists=1,
                                        family=len(self.backends))
                if not self.performance_validation:   # DIAGNOSTIC: measured and reported, the first is taken
                    report.chosen = head.key
                    if head.key not in verdict.judgements:   # the confirm session failed: it does not decide either
                        report.notes[head.key] = diagnostic_failed_text(verdict)
                    report.decision = f"chose {head.backend}, the first that built correctly: {report.notes[head.key]}"
                    handle.cancel()
                    return
                if verdict.chosen is not None:
                    report.decision = f"{report.decision} (the first accepted in priority order)"
                    handle.cancel()
                    return
                said.append(f"{head.backend}: {report.notes.get(head.key) or report.decision}")
                executor.release(context, head)
        report.chosen = None
        report.decision = "kept eager: no backend was accepted (" + "; ".join(
            said + ([failures_text(failed)] if failed else [])) + ")"
