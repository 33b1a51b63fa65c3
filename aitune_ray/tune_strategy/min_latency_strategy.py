"""MinLatencyStrategy: of the candidates the decision procedure accepts as faster than eager, the one with the
lowest latency at the smallest recorded batch size."""

from __future__ import annotations

from aitune_ray.decision import LATENCY, Objective
from aitune_ray.tune_strategy.profiling_strategy import ProfilingStrategy


class MinLatencyStrategy(ProfilingStrategy):
    """AITune's MinLatencyStrategy over the one decision procedure.

    Latency here is the median, over the confirm session's paired rounds, of a candidate's time per call
    (ms) at the smallest recorded batch size: AITune profiles batch size 1, which tune()'s default batch
    sizes ([1, 2]) record; to judge batch size 1 alone, as AITune does, record only it (batch_sizes=[1]).
    Each round times a burst of back-to-back calls (aitune_ray.measure.timing), not one call between two
    synchronizes as AITune's profiler does: on the CPU the two agree; on a GPU a burst overlaps host and
    device and reads a host-bound call faster than one call alone.

    Every candidate is built and screened (ranked by its paired speedup at that batch size); the
    max_finalists best are confirmed in one session. Performance validation ENABLED: only candidates the
    accept rule accepts may win (faster than eager over the recorded call mix, not slower at any recorded
    batch size), the one with the lowest latency among them; none accepted keeps eager, saying why.
    DIAGNOSTIC or DISABLED: the finalist with the lowest latency wins (DIAGNOSTIC reports its comparison with
    eager). A module whose candidates all fail to build stays eager, as with MaxThroughput.
    """

    def objective(self) -> Objective:
        return Objective(LATENCY)
