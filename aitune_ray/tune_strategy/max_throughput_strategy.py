"""MaxThroughputStrategy: build and profile every backend, keep the fastest one that beats eager."""

from __future__ import annotations

import logging

from aitune_ray.backend.backend import class_path
from aitune_ray.backend.batch_dispatch import BatchDispatchBackend, BatchDispatchConfig
from aitune_ray.measure.timing import Timing
from aitune_ray.results import OK, BuildResult
from aitune_ray.tune_strategy.performance_validation import judge, mix_time, series
from aitune_ray.tune_strategy.tune_strategy import TuneStrategy

logger = logging.getLogger(__name__)


class MaxThroughputStrategy(TuneStrategy):
    """remeasure_margin: finalists within this fraction of the best (by their first timings) are re-timed
    side by side with eager on one device, in paired rounds, and the decision rule judges them there.
    When none of them passes, the next group of candidates is re-timed likewise, as long as any is left
    whose first timings are not clearly slower than eager. The fastest finalist that passes (by its
    median speedup over the recorded mix) is chosen.

    First timings are taken one after another, each at its own moment. When eager's own time over the mix
    moved between its first timing and the re-measure by more than the margin (the host changed state during
    the tuning), they cannot rank the candidates by the margin alone: one timed in a slow stretch may have
    been left out. The margin is then widened by that movement, and the candidates it brings in are re-timed
    side by side with the leader, which the decision then rests on (see _retime_left_out).

    dispatch_by_batch_size: where different candidates win at different recorded batch sizes, deploy a
    BatchDispatchBackend that sends each call, by its batch size, to that size's winner (eager where
    none wins). Every candidate is then re-timed side by side, since one slower over the mix may still
    win at one size. Off by default."""

    overlap_baseline = True   # eager is timed again beside the finalists before the decision

    def __init__(self, backends=None, *, remeasure_margin: float = 0.10, dispatch_by_batch_size: bool = False,
                 **kwargs):
        super().__init__(backends, **kwargs)
        self.remeasure_margin = remeasure_margin
        self.dispatch_by_batch_size = dispatch_by_batch_size

    @property
    def per_size_wins(self) -> bool:   # with dispatch, a candidate may serve the one size it wins
        return self.dispatch_by_batch_size

    def jobs(self):
        """Every candidate is built anyway, so the order is free: costly builds first (longest-first
        scheduling), which keeps one late long build from finishing alone on a parallel executor."""
        by_key = {b.key(): b.cost_hint() for b in self.backends}
        return sorted(super().jobs(), key=lambda job: (-by_key[job.key], job.priority))

    def _release_out_of_reach(self, context, executor, report, released: set[str]) -> None:
        """Builds slower than the best so far by more than remeasure_margin are not in the first group of
        finalists (the best only gets faster): their memory goes back now instead of at the decision. Should
        a later group be re-timed after all, the executor restores them from their artifacts or recipes."""
        if self.dispatch_by_batch_size:   # then every candidate is re-timed side by side
            return
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
        margin = float("inf") if self.dispatch_by_batch_size else self.remeasure_margin
        pending = sorted(ok, key=lambda r: mix_time(r.timing, mix))
        eager_mix = mix_time(baseline.__getitem__, mix)
        passed: list[BuildResult] = []
        group: list[BuildResult] = []
        while pending and not passed:
            best = mix_time(pending[0].timing, mix)
            group = [r for r in pending if mix_time(r.timing, mix) <= best * (1 + margin)]
            outcomes = self._judge(context, executor, group, baseline, report)
            passed = [r for r in group if outcomes[r.key].passed]
            # the rest, unless their first timings already put them clearly behind eager
            pending = [r for r in pending if r not in group
                       and mix_time(r.timing, mix) * (1 - self.noise_tolerance) <= eager_mix]
        drift = report.eager_drift()
        late = self._retime_left_out(context, executor, report, baseline, ok, passed, drift) if passed else None
        if late is not None:
            passed, group = late
        for r in ok:
            if r.key not in report.verdicts:   # never re-measured: judged on their first timings
                self._record_gate(report, r, baseline)
        winner = self._fastest(report, passed)
        dispatch = self._dispatch(report, group, winner) if self.dispatch_by_batch_size else None
        if dispatch is not None:
            report.results.append(dispatch)
            report.chosen = dispatch.key
            routes = ", ".join(f"bs {bs}: {self._name_of(report, k)}" for bs, k in sorted(report.dispatch.items()))
            report.decision = f"chose a batch-size dispatch ({routes}): {report.notes[dispatch.key]}"
            return
        if winner is None:
            report.decision = "kept eager: no backend beat eager (" + "; ".join(
                f"{r.backend}: {report.notes[r.key]}" for r in ok) + ")"
            return
        report.chosen = winner.key
        report.decision = (f"chose {winner.backend}, fastest of {len(passed)} re-measured that passed: "
                           f"{report.notes[winner.key]}")
        if late is not None:
            report.decision += (f" (eager's speed moved {drift:.2f}x during the tuning, so "
                                f"the candidates its first timings had left out of the re-measure were re-timed "
                                f"beside the leader)")

    def _retime_left_out(self, context, executor, report, baseline, ok: list[BuildResult],
                         passed: list[BuildResult], drift: float) -> tuple[list[BuildResult], list[BuildResult]] | None:
        """When eager moved by more than the margin (drift: ModuleReport.eager_drift), re-time beside the
        leader the candidates that the margin widened by that factor brings in and that no re-measure has timed
        yet. Returns (passed, group) of that re-measure; None when there was none to re-time (without dispatch
        only: with it every candidate was re-timed). Where none passes in it, or it did not run (the leader is
        not paired in it), the leader stands on the rounds that chose it, and None."""
        if self.dispatch_by_batch_size or drift <= 1 + self.remeasure_margin:   # the margin covers that much
            return None
        mix = report.call_mix

        def first(r: BuildResult) -> float:   # its first timing's, whether or not it was re-measured since
            return mix_time(lambda bs: Timing.from_dict(r.timings[bs]), mix)

        widened = min(first(r) for r in ok) * (1 + self.remeasure_margin) * drift
        left_out = [r for r in ok if r.key not in report.verdicts and first(r) <= widened]
        if not left_out:
            return None
        leader = self._fastest(report, passed)
        stood = (dict(leader.remeasured), report.speedups[leader.key], report.notes[leader.key],
                 report.verdicts[leader.key], dict(report.remeasured_baseline))
        logger.info("[%s] eager moved %.2fx since its first timing: re-timing %s beside %s", context.name,
                    drift, ", ".join(r.backend for r in left_out), leader.backend)
        group = [leader, *left_out]
        outcomes = self._judge(context, executor, group, baseline, report)
        now = [r for r in group if outcomes[r.key].passed]
        if now and report.verdicts[leader.key]["interval"].get("paired"):
            return now, group
        (leader.remeasured, report.speedups[leader.key], report.notes[leader.key], report.verdicts[leader.key],
         report.remeasured_baseline) = stood
        return None

    @staticmethod
    def _fastest(report, passed: list[BuildResult]) -> BuildResult | None:
        """The choice among candidates that passed: the highest median speedup over the recorded mix."""
        return max(passed, key=lambda r: report.speedups[r.key]) if passed else None

    @staticmethod
    def _name_of(report, key: str | None) -> str:
        return "eager" if key is None else next(r.backend for r in report.results if r.key == key)

    def _dispatch(self, report, group: list[BuildResult], winner: BuildResult | None) -> BuildResult | None:
        """A dispatch result when per-size winners differ and together pass the rule; else None."""
        mix = report.call_mix
        gate = 1.0 + self.min_speedup_ratio
        paired = [r for r in group if (report.verdicts.get(r.key) or {}).get("interval", {}).get("paired")]
        if not paired or not report.remeasured_baseline:
            return None
        # Each size starts with the single winner (eager without one) and goes to another candidate only
        # where that one clears the gate there and beats the winner's median at that size.
        single = winner.key if winner is not None and winner in paired else None
        routes: dict[int, str | None] = {}
        for bs in mix:
            best_key = single
            best = report.verdicts[single]["intervals"][bs]["median"] if single else 1.0
            for r in paired:
                interval = report.verdicts[r.key]["intervals"][bs]
                if interval["low"] >= gate and interval["median"] > best:
                    best_key, best = r.key, interval["median"]
            routes[bs] = best_key
        if len(set(routes.values())) < 2 and set(routes.values()) <= {single}:
            return None     # one backend (or eager) wins everywhere: no dispatch needed
        by_key = {r.key: r for r in paired}
        eager = series(report.remeasured_baseline, mix)
        members = {bs: by_key[k] for bs, k in routes.items() if k is not None}
        n = min([len(eager[bs]) for bs in mix] + [len(r.remeasured[bs]["rounds_ms"]) for bs, r in members.items()])
        composed = {bs: (by_key[routes[bs]].remeasured[bs] if routes[bs] else report.remeasured_baseline[bs])
                    for bs in mix}
        outcome = judge({bs: eager[bs][:n] for bs in mix},
                        {bs: composed[bs]["rounds_ms"][:n] for bs in mix}, mix, paired=True,
                        enabled=self.performance_validation, min_speedup_ratio=self.min_speedup_ratio,
                        noise_tolerance=self.noise_tolerance)
        if not outcome.passed or (winner is not None and outcome.mix_speedup <= report.speedups[winner.key]):
            return None
        config = BatchDispatchConfig(routes=routes, members={k: by_key[k].spec for k in set(routes.values()) if k})
        result = BuildResult(key=f"{BatchDispatchBackend.__name__}-{config.key()}",
                             backend=BatchDispatchBackend.__name__,
                             spec={"type": class_path(BatchDispatchBackend), "config": config.to_dict()},
                             status=OK, device=paired[0].device, gpu=paired[0].gpu, node=paired[0].node,
                             timings={bs: (by_key[k].timings[bs] if k else report.baseline[bs])
                                      for bs, k in routes.items()},
                             remeasured={bs: Timing.from_dict(composed[bs]).to_dict() for bs in mix})
        result.correctness = max((r.correctness for r in members.values() if r.correctness),
                                 key=lambda c: c.get("max_error", 0.0), default=None)
        report.dispatch = dict(routes)
        self._record(report, result, outcome)
        return result
