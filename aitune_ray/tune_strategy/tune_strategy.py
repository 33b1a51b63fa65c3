"""TuneStrategy: turns candidate backends into jobs, hands them to an executor, decides on the results."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Iterable

from aitune_ray.backend.backend import Backend
from aitune_ray.executor import Executor, RunHandle, TuneContext
from aitune_ray.errors import ConfigError
from aitune_ray.measure.timing import MeasureConfig, Timing, merge_timings
from aitune_ray.results import BuildResult, CandidateJob
from aitune_ray.max_batch import check_limit
from aitune_ray.tune_strategy.defaults import default_backends
from aitune_ray.tune_strategy.performance_validation import GateOutcome, could_pass, evaluate, judged_early
from aitune_ray.tune_strategy.validation_mode import PerformanceValidationMode, speedup_ratio, validation_mode
from aitune_ray.tune_strategy.report import ModuleReport

logger = logging.getLogger(__name__)


class TuneStrategy(ABC):
    """Common options of every strategy.

    tolerance: relative L2 error bound for every floating output (None: each backend's own default, else
        a per-dtype default), or a dict mapping backend class names to bounds.
    backends: the candidates (None: AITune's default list for this strategy and workflow, "aot" or "jit";
        for_aot()/for_jit() name the workflow).
    min_speedup_ratio: a backend must run the recorded mix at least (1 + this) times faster than eager,
        read on the lower bound of the confidence interval of its speedup (see performance_validation).
    min_speedup_threshold_percent: AITune's name for it, in percent (1.0 is 0.01, the default); give one.
    noise_tolerance: and at no recorded batch size may that interval lie below 1 - this.
    deploy_check_rounds: paired rounds of the post-deploy check (the wrapped Module, as deployed, against
        eager; see tune_strategy.deploy). 0 turns the check off.

    Every strategy decides on paired, interleaved rounds of the candidate beside eager on one device
    (Executor.remeasure), measured once more (doubling the rounds) when the first rounds do not decide and
    the candidate could still pass (performance_validation.could_pass); one that could not is judged on
    its first rounds. An executor that does not re-measure leaves the unpaired first timings to decide,
    under the same rule.
    """

    #: Whether a candidate may win at one recorded batch size alone (a batch-size dispatch): then one whose
    #: median beats the gate at any size is worth more rounds, not only one that beats it over the mix.
    per_size_wins = False

    #: Whether builds may start while eager is first timed (only for strategies that time eager again
    #: beside their finalists before deciding).
    overlap_baseline = False

    def __init__(self, backends: Iterable[Backend] | None = None, *, tolerance: float | dict[str, float] | None = None,
                 min_speedup_ratio: float | None = None, noise_tolerance: float = 0.03,
                 measure_config: MeasureConfig | None = None, deploy_check_rounds: int = 20,
                 min_speedup_threshold_percent: float | None = None, workflow: str = "aot"):
        if backends is None:   # AITune's defaults for this strategy and workflow (tune_strategy.defaults)
            backends = default_backends(type(self).__name__, workflow)
        self.workflow = workflow
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
        self.min_speedup_ratio = speedup_ratio(min_speedup_ratio, min_speedup_threshold_percent)
        self.noise_tolerance = noise_tolerance
        self.measure_config = measure_config or MeasureConfig()
        self.performance_validation_mode = PerformanceValidationMode.ENABLED
        self.find_max_batch_size_enabled = False
        self.find_max_batch_size_limit: int | None = None
        if deploy_check_rounds < 0:
            raise ConfigError(f"deploy_check_rounds must not be negative, got {deploy_check_rounds}")
        self.deploy_check_rounds = deploy_check_rounds

    @classmethod
    def for_aot(cls, **kwargs) -> "TuneStrategy":
        """AITune's AOT workflow: its default AOT candidates unless backends= is given."""
        return cls(workflow="aot", **kwargs)

    @classmethod
    def for_jit(cls, **kwargs) -> "TuneStrategy":
        """AITune's JIT workflow: its default JIT candidates unless backends= is given."""
        return cls(workflow="jit", **kwargs)

    @property
    def min_speedup_threshold_percent(self) -> float:
        """AITune's name for min_speedup_ratio, in percent."""
        return self.min_speedup_ratio * 100.0

    @property
    def performance_validation(self) -> bool:
        """Whether the comparison with eager takes part in the choice (the mode is ENABLED)."""
        return self.performance_validation_mode is PerformanceValidationMode.ENABLED

    def enable_performance_validation(self, mode: PerformanceValidationMode | str | bool = True) -> "TuneStrategy":
        """ENABLED (or True, the default): a candidate must beat eager; DIAGNOSTIC: the comparison is reported
        only; DISABLED (or False): not used either. Any other value is a ConfigError."""
        self.performance_validation_mode = validation_mode(mode)
        return self

    def enable_correctness_check(self, enable: bool = True) -> "TuneStrategy":
        """Correctness is always checked here (relative L2 error against eager, NaN/Inf, shapes): True is
        accepted; False is refused, naming the option that loosens the check."""
        if not isinstance(enable, bool):
            raise ConfigError(f"enable_correctness_check takes a bool, got {enable!r}")
        if not enable:
            raise ConfigError("the correctness check cannot be turned off here; to accept larger differences "
                              "from eager, pass tolerance=<relative L2 bound> (or a dict by backend class name) "
                              "to the strategy")
        return self

    def enable_find_max_batch_size(self, enable: bool = True, *, limit: int | None = None) -> "TuneStrategy":
        """Before tuning, find the largest batch the module runs on the device (doubling, then bisection)
        and add it to the recorded batch sizes (see aitune_ray.max_batch). limit: the largest batch tried
        (default: max_batch.CPU_LIMIT on the CPU). Off by default here, on in AITune's AOT workflow."""
        if not isinstance(enable, bool):
            raise ConfigError(f"enable_find_max_batch_size takes a bool, got {enable!r}")
        self.find_max_batch_size_enabled = enable
        self.find_max_batch_size_limit = check_limit(limit)
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

    def gate(self, result: BuildResult, baseline: dict[int, Timing], mix: dict[int, int], *,
             paired: bool = False, final: bool = True) -> GateOutcome:
        outcome = evaluate(result, baseline, mix, enabled=self.performance_validation, paired=paired, final=final,
                           min_speedup_ratio=self.min_speedup_ratio, noise_tolerance=self.noise_tolerance)
        if self.performance_validation_mode is PerformanceValidationMode.DIAGNOSTIC:
            outcome.reason = f"performance validation diagnostic: {outcome.mix_speedup:.3f}x over the recorded mix, " \
                             "reported, not used for the choice"
        return outcome

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

    def _record_gate(self, report: ModuleReport, result: BuildResult, baseline: dict[int, Timing], *,
                     paired: bool = False) -> GateOutcome:
        outcome = self.gate(result, baseline, report.call_mix, paired=paired)
        self._record(report, result, outcome)
        return outcome

    @staticmethod
    def _record(report: ModuleReport, result: BuildResult, outcome: GateOutcome) -> None:
        report.speedups[result.key] = outcome.mix_speedup
        report.notes[result.key] = outcome.reason
        report.verdicts[result.key] = outcome.to_dict()

    def _judge(self, context: TuneContext, executor: Executor, results: list[BuildResult],
               baseline: dict[int, Timing], report: ModuleReport) -> dict[str, GateOutcome]:
        """Re-measure results beside eager in paired rounds and apply the decision rule to each; the
        results those rounds do not decide are measured once more (the round count doubled) and judged on
        all rounds, when they could still pass; the others are judged on the first rounds as at the last
        look. Without re-measurement, the unpaired first timings decide. Records every outcome."""
        mix = report.call_mix
        eager = executor.remeasure(context, results, baseline) if results else None
        paired = [r for r in results if eager and set(r.remeasured) == set(mix)]
        # a result the executor could not re-measure (it failed to restore there) keeps its first timings
        outcomes = {r.key: self.gate(r, baseline, mix) for r in results if r not in paired}
        if paired:
            report.remeasured_baseline = {bs: t.to_dict() for bs, t in eager.items()}
            outcomes.update({r.key: self.gate(r, eager, mix, paired=True, final=False) for r in paired})
            undecided = [r for r in paired if not outcomes[r.key].decided]
            again = [r for r in undecided
                     if could_pass(outcomes[r.key], self.min_speedup_ratio, per_size=self.per_size_wins)]
            for r in undecided:
                if r not in again:   # more rounds would not make it pass: the last look now
                    outcomes[r.key] = judged_early(self.gate(r, eager, mix, paired=True))
            if again:
                first = {r.key: dict(r.remeasured) for r in again}
                more = executor.remeasure(context, again, baseline)
                if more and all(set(r.remeasured) == set(mix) for r in again):
                    eager = {bs: merge_timings(eager[bs], more[bs]) for bs in mix}
                    for r in again:
                        r.remeasured = {bs: merge_timings(Timing.from_dict(first[r.key][bs]),
                                                          Timing.from_dict(r.remeasured[bs])).to_dict()
                                        for bs in mix}
                else:   # the second pass failed: judge the first rounds alone
                    for r in again:
                        r.remeasured = first[r.key]
                for r in again:
                    outcomes[r.key] = self.gate(r, eager, mix, paired=True)
                report.remeasured_baseline = {bs: t.to_dict() for bs, t in eager.items()}
        for r in results:
            self._record(report, r, outcomes[r.key])
        return outcomes

    @abstractmethod
    def _decide(self, context: TuneContext, executor: Executor, handle: RunHandle,
                baseline: dict[int, Timing], report: ModuleReport) -> None:
        """Consume results from handle, append them to report.results and set report.chosen/decision."""
