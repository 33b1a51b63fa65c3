"""TuneStrategy: turns candidate backends into jobs, hands them to an executor, decides on the results."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Iterable

from aitune_ray.backend.backend import Backend
from aitune_ray.executor import Executor, RunHandle, TuneContext
from aitune_ray.errors import ConfigError
from aitune_ray.measure.timing import MeasureConfig, Timing
from aitune_ray.results import BuildResult, CandidateJob
from aitune_ray.tune_strategy.performance_validation import GateOutcome, evaluate
from aitune_ray.tune_strategy.report import ModuleReport

logger = logging.getLogger(__name__)


class TuneStrategy(ABC):
    """Common options of every strategy.

    tolerance: relative L2 error bound for every floating output (None: each backend's own default, else
        a per-dtype default), or a dict mapping backend class names to bounds.
    min_speedup_ratio: a backend must run the recorded mix at least (1 + this) times faster than eager.
    noise_tolerance: and be no more than this fraction slower than eager at any recorded batch size.
    """

    #: Whether builds may start while eager is first timed (only for strategies that time eager again
    #: beside their finalists before deciding).
    overlap_baseline = False

    def __init__(self, backends: Iterable[Backend], *, tolerance: float | dict[str, float] | None = None,
                 min_speedup_ratio: float = 0.01, noise_tolerance: float = 0.03,
                 measure_config: MeasureConfig | None = None):
        self.backends = list(backends)
        for b in self.backends:
            if not isinstance(b, Backend):
                raise ConfigError(f"{type(self).__name__} takes Backend instances, got {type(b).__name__}")
        if not self.backends:
            raise ConfigError(f"{type(self).__name__} needs at least one backend")
        keys = [b.key() for b in self.backends]
        if len(set(keys)) != len(keys):
            raise ConfigError(f"{type(self).__name__} was given the same backend and config twice")
        self.tolerance = tolerance
        self.min_speedup_ratio = min_speedup_ratio
        self.noise_tolerance = noise_tolerance
        self.measure_config = measure_config or MeasureConfig()
        self.performance_validation = True

    def enable_performance_validation(self, enabled: bool = True) -> "TuneStrategy":
        """Turn the comparison with the eager baseline on (default) or off."""
        self.performance_validation = enabled
        return self

    @property
    def name(self) -> str:
        return type(self).__name__

    def jobs(self) -> list[CandidateJob]:
        return [CandidateJob(key=b.key(), spec=b.spec(), tolerance=self._tolerance_for(b),
                             measure=self.measure_config.to_dict(), priority=i)
                for i, b in enumerate(self.backends)]

    def _tolerance_for(self, backend: Backend) -> float | None:
        if isinstance(self.tolerance, dict):
            return self.tolerance.get(backend.name)
        return self.tolerance

    def gate(self, result: BuildResult, baseline: dict[int, Timing], mix: dict[int, int]) -> GateOutcome:
        return evaluate(result, baseline, mix, enabled=self.performance_validation,
                        min_speedup_ratio=self.min_speedup_ratio, noise_tolerance=self.noise_tolerance)

    def tune(self, context: TuneContext, executor: Executor) -> ModuleReport:
        """Run the candidates through executor and fill a report; report.chosen is None for eager."""
        # A strategy that re-measures eager beside its finalists before deciding may let a parallel executor
        # start building while eager is first timed; the others time eager first, with nothing running.
        handle = executor.submit_early(context, self.jobs()) if self.overlap_baseline else None
        try:
            baseline = executor.baseline(context)
            if handle is None:
                handle = executor.submit(context, self.jobs())
            report = ModuleReport(module=context.name, strategy=self.name, device=str(context.device),
                                  call_mix=context.samples.call_mix(),
                                  baseline={bs: t.to_dict() for bs, t in baseline.items()})
            context.report = report
            self._decide(context, executor, handle, baseline, report)
        finally:
            if handle is not None:
                handle.cancel()
        logger.info("[%s] %s", context.name, report.decision)
        return report

    def _record_gate(self, report: ModuleReport, result: BuildResult, baseline: dict[int, Timing]) -> GateOutcome:
        outcome = self.gate(result, baseline, report.call_mix)
        report.speedups[result.key] = outcome.mix_speedup
        report.notes[result.key] = outcome.reason
        return outcome

    @abstractmethod
    def _decide(self, context: TuneContext, executor: Executor, handle: RunHandle,
                baseline: dict[int, Timing], report: ModuleReport) -> None:
        """Consume results from handle, append them to report.results and set report.chosen/decision."""
