"""FirstWinsStrategy: the first backend, in the given order, that builds, is correct and beats eager."""

from __future__ import annotations

from aitune_ray.tune_strategy.tune_strategy import TuneStrategy


class FirstWinsStrategy(TuneStrategy):
    """Try backends in priority order. Executors may build several at once; the decision still follows
    the order, and what is left is cancelled as soon as a higher-priority candidate has won."""

    def _decide(self, context, executor, handle, baseline, report) -> None:
        order = [job.key for job in self.jobs()]
        done = {}
        failures = []
        for result in handle:
            done[result.key] = result
            report.results.append(result)
            while order and order[0] in done:
                head = done[order.pop(0)]
                if not head.ok:
                    failures.append(f"{head.backend}: {head.status}")
                    continue
                outcome = self._judge(context, executor, [head], baseline, report)[head.key]
                if outcome.passed:
                    report.chosen = head.key
                    report.decision = f"chose {head.backend}, the first that passed: {outcome.reason}"
                    handle.cancel()
                    return
                failures.append(f"{head.backend}: {outcome.reason}")
        report.decision = "kept eager: no backend passed (" + "; ".join(failures) + ")"
