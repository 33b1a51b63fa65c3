"""LatencyBudgetStrategy: of the candidates the decision procedure accepts as faster than eager, the one with
the highest throughput at a recorded batch size whose latency is within the budget."""

from __future__ import annotations

from aitune_ray.decision import BUDGET, OVER_BUDGET, Objective
from aitune_ray.errors import ConfigError, LatencyBudgetError
from aitune_ray.tune_strategy.profiling_strategy import ProfilingStrategy


class LatencyBudgetStrategy(ProfilingStrategy):
    """AITune's LatencyBudgetStrategy over the one decision procedure.

    latency_budget_ms: the most a call may take, in milliseconds (required, positive; AITune's keyword and
        position: LatencyBudgetStrategy(latency_budget_ms, backends=None, ...)).

    A candidate's latency at a recorded batch size is the median, over the confirm session's paired rounds,
    of its time per call (ms) there (a burst of back-to-back calls per round, aitune_ray.measure.timing). Its
    score is its throughput (batch size / latency, samples/s) at the recorded batch size with the highest
    throughput among those whose latency is at most the budget; within the budget at none, it may not win.
    AITune sweeps batch sizes itself; here the recorded batch sizes are the sweep (tune(batch_sizes=...)).

    Performance validation ENABLED: the winner is the accepted candidate (faster than eager over the
    recorded call mix, not slower at any recorded batch size, by the accept rule) with the highest score;
    candidates within the budget but none accepted keep eager, saying why. DIAGNOSTIC or DISABLED: the
    finalist with the highest score wins. When no finalist is within the budget at any recorded batch size,
    tuning the module fails with LatencyBudgetError (a RuntimeError, as AITune raises), naming every
    finalist's latencies and eager's; tune() keeps that module eager and reports the reason (or raises it
    with ignore_failing_modules=False). A module whose candidates all fail to build stays eager.
    """

    def __init__(self, latency_budget_ms: float, backends=None, **kwargs):
        if isinstance(latency_budget_ms, bool) or not isinstance(latency_budget_ms, int | float) \
                or not latency_budget_ms > 0:
            raise ConfigError(f"latency_budget_ms must be a positive number of milliseconds, got {latency_budget_ms!r}")
        super().__init__(backends, **kwargs)
        self.latency_budget_ms = float(latency_budget_ms)

    def objective(self) -> Objective:
        return Objective(BUDGET, self.latency_budget_ms)

    def _take(self, context, report, ok, verdict) -> None:
        if verdict.kind == OVER_BUDGET:
            raise LatencyBudgetError(f"{context.name}: {report.decision}")
