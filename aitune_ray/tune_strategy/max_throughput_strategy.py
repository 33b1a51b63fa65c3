"""MaxThroughputStrategy: build every backend, keep the best one the decision procedure accepts."""

from __future__ import annotations

import logging

from aitune_ray.backend.backend import class_path
from aitune_ray.backend.batch_dispatch import BatchDispatchBackend, BatchDispatchConfig
from aitune_ray.decision import DISPATCH
from aitune_ray.records.results import OK, BuildResult
from aitune_ray.tune_strategy.profiling_strategy import ProfilingStrategy

logger = logging.getLogger(__name__)


class MaxThroughputStrategy(ProfilingStrategy):
    """Every candidate is built and screened; the max_finalists best by screening are confirmed in one
    session and the accepted one with the highest median speedup over the recorded call mix wins. Builds
    that fall out of the finalists are released as soon as they do (ProfilingStrategy).

    dispatch_by_batch_size: where different candidates are accepted at different recorded batch sizes,
    deploy a BatchDispatchBackend that sends each call, by its batch size, to that size's best (eager where
    none is accepted), when the composite is itself accepted and beats the single winner. Off by default."""

    def __init__(self, backends=None, *, dispatch_by_batch_size: bool = False, **kwargs):
        super().__init__(backends, **kwargs)
        self.dispatch_by_batch_size = dispatch_by_batch_size

    def _take(self, context, report, ok: list[BuildResult], verdict) -> None:
        if verdict.chosen == DISPATCH:
            dispatch = self._dispatch_result(report, ok, verdict.routes)
            report.results.append(dispatch)
            report.chosen, report.dispatch = dispatch.key, dict(verdict.routes)
            judgement = verdict.judgements[DISPATCH]
            report.speedups[dispatch.key] = judgement.median
            report.notes[dispatch.key] = report.decision
            report.verdicts[dispatch.key] = report.verdicts.pop(DISPATCH, {})

    @staticmethod
    def _dispatch_result(report, ok: list[BuildResult], routes: dict[int, str | None]) -> BuildResult:
        """The BuildResult of a batch-size dispatch over routes (its members are results of ok)."""
        by_key = {r.key: r for r in ok}
        members = {bs: by_key[k] for bs, k in routes.items() if k is not None}
        config = BatchDispatchConfig(routes=routes, members={k: by_key[k].spec for k in set(routes.values()) if k})
        first = next(iter(members.values()))
        remeasured = {bs: (members[bs].remeasured[bs] if bs in members else report.remeasured_baseline[bs])
                      for bs in routes}
        result = BuildResult(key=f"{BatchDispatchBackend.__name__}-{config.key()}", backend=BatchDispatchBackend.__name__,
                             spec={"type": class_path(BatchDispatchBackend), "config": config.to_dict()},
                             status=OK, device=first.device, gpu=first.gpu, node=first.node,
                             timings={bs: (members[bs].timings[bs] if bs in members else report.baseline[bs])
                                      for bs in routes},
                             remeasured=remeasured)
        result.correctness = max((r.correctness for r in members.values() if r.correctness),
                                 key=lambda c: c.get("max_error", 0.0), default=None)
        return result
