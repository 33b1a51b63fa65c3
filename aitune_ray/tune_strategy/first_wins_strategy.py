"""FirstWinsStrategy: the first backend, in the given order, that builds, is correct and is accepted."""

from __future__ import annotations

from aitune_ray.tune_strategy.tune_strategy import TuneStrategy, failures_text


class FirstWinsStrategy(TuneStrategy):
    """Try backends in priority order, each confirmed alone and accepted or not by the decision procedure.
    A parallel executor builds ahead speculatively; the decision still follows the order, and what is left is
    cancelled as soon as a candidate is accepted. With performance validation off, the first that builds
    correctly is taken."""

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
                if not self.performance_validation:
                    report.chosen = head.key
                    report.decision = f"chose {head.backend}, the first that built correctly: performance validation off"
                    handle.cancel()
                    return
                # each candidate is one more chance of a false win: K counts every candidate it may confirm
                verdict = self._verdict(context, executor, report, [head], max_finalists=1,
                                        family=len(self.backends))
                if verdict.chosen is not None:
                    report.decision = f"{report.decision} (the first accepted in priority order)"
                    handle.cancel()
                    return
                said.append(f"{head.backend}: {report.notes.get(head.key) or report.decision}")
                executor.release(context, head)
        report.chosen = None
        report.decision = "kept eager: no backend was accepted (" + "; ".join(
            said + ([failures_text(failed)] if failed else [])) + ")"
