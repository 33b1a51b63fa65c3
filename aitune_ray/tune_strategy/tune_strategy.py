"""TuneStrategy: turns candidate backends into jobs, hands them to an executor, and asks the decision
procedure (aitune_ray.decision) to choose. A strategy is a policy over that procedure: which candidates it
confirms, in what order, and when it stops. It never decides itself."""

from __future__ import annotations

import copy
import logging
from abc import ABC, abstractmethod
from typing import Any, Iterable

from aitune_ray.backend.backend import Backend
from aitune_ray.decision import Objective, Rule, Session, Verdict, choose
from aitune_ray.decision.screen import MAX_FINALISTS
from aitune_ray.measure.request import ServingContext, TimingRequest
from aitune_ray.errors import ConfigError
from aitune_ray.worker.seam import Executor, RunHandle, TuneContext
from aitune_ray.measure.timing import MIX, MeasureConfig, summary
from aitune_ray.model.max_batch import check_limit
from aitune_ray.records.results import BuildResult, CandidateJob
from aitune_ray.tune_strategy.defaults import default_backends
from aitune_ray.report.model import ModuleReport
from aitune_ray.tune_strategy.validation_mode import PerformanceValidationMode, speedup_ratio, validation_mode

logger = logging.getLogger(__name__)


class TuneStrategy(ABC):
    """Common options of every strategy.

    tolerance: relative L2 error bound for every floating output (None: each backend's own default, else
        a per-dtype default), or a dict mapping backend class names to bounds.
    backends: the candidates (None: AITune's default list for this strategy and workflow, "aot" or "jit";
        for_aot()/for_jit() name the workflow).
    min_speedup_ratio: a backend must run the recorded call mix at least (1 + this) times faster than eager,
        read on the lower bound of its confidence interval (aitune_ray.decision.rule).
    min_speedup_threshold_percent: AITune's name for it, in percent (1.0 is 0.01, the default); give one.
    noise_tolerance: and at no recorded batch size may that lower bound lie below 1 - this.
    max_finalists: candidates confirmed in one session at most (the best by screening); the confidence of
        every interval is 1 - alpha / (the number confirmed).
    alpha: the chance of choosing a candidate that is not faster by the gate, over all finalists together,
        is at most alpha / 2.
    deploy_check_rounds: paired rounds of the post-deploy timing (the wrapped Module, as deployed, against
        eager), reported as information only (0: none).
    """

    #: Whether builds may start while eager is first timed (eager's first timing is information only).
    overlap_baseline = True

    def __init__(self, backends: Iterable[Backend] | None = None, *, tolerance: float | dict[str, float] | None = None,
                 min_speedup_ratio: float | None = None, noise_tolerance: float = 0.03,
                 measure_config: MeasureConfig | None = None, deploy_check_rounds: int = 20,
                 max_finalists: int = MAX_FINALISTS, alpha: float = 0.05,
                 min_speedup_threshold_percent: float | None = None, workflow: str = "aot",
                 sink=None, profiling_config=None):
        if sink is not None and not callable(sink):
            raise ConfigError(f"sink must be a function that takes one line of text, got {type(sink).__name__}")
        if profiling_config is not None:
            raise ConfigError("profiling_config (AITune's ProfilingConfig) is not used here: every timing is a "
                              "serving loop of paired rounds beside eager; pass measure_config=aitune_ray.measure."
                              "timing.MeasureConfig(warmup_runs=..., min_runs=..., max_runs=..., max_seconds=...)")
        self.sink = sink   # AITune's: a function that gets the strategy's status lines (besides the log)
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
        if deploy_check_rounds < 0:
            raise ConfigError(f"deploy_check_rounds must not be negative, got {deploy_check_rounds}")
        if max_finalists < 1:
            raise ConfigError(f"max_finalists must be at least 1, got {max_finalists}")
        if not 0 < alpha < 1:
            raise ConfigError(f"alpha must lie between 0 and 1, got {alpha}")
        self.tolerance = tolerance
        self.min_speedup_ratio = speedup_ratio(min_speedup_ratio, min_speedup_threshold_percent)
        self.noise_tolerance = noise_tolerance
        self.measure_config = measure_config or MeasureConfig()
        self.performance_validation_mode = PerformanceValidationMode.ENABLED
        self.find_max_batch_size_enabled = False
        self.find_max_batch_size_limit: int | None = None
        self.deploy_check_rounds = deploy_check_rounds
        self.max_finalists = max_finalists
        self.alpha = alpha

    @classmethod
    def for_aot(cls, **kwargs) -> "TuneStrategy":
        """AITune's AOT workflow: its default AOT candidates unless backends= is given."""
        return cls(workflow="aot", **kwargs)

    @classmethod
    def for_jit(cls, **kwargs) -> "TuneStrategy":
        """AITune's JIT workflow: its default JIT candidates unless backends= is given."""
        return cls(workflow="jit", **kwargs)

    def clone(self) -> "TuneStrategy":
        """A deep copy, as AITune's (a strategy is not shared between modules)."""
        return copy.deepcopy(self)

    def to_json_dict(self) -> dict[str, Any]:
        """The strategy's configuration as JSON data, as AITune's: its name, its backends and options."""
        return {"strategy": type(self).__name__, "workflow": self.workflow,
                "backends": [b.spec() for b in self.backends],
                "min_speedup_ratio": self.min_speedup_ratio, "noise_tolerance": self.noise_tolerance,
                "performance_validation": self.performance_validation_mode.value,
                "find_max_batch_size": self.find_max_batch_size_enabled,
                "tolerance": self.tolerance, "measure_config": self.measure_config.to_dict(),
                "deploy_check_rounds": self.deploy_check_rounds, "max_finalists": self.max_finalists,
                "alpha": self.alpha}

    def describe(self) -> str:
        """What the strategy does, in lines of text, as AITune's describe()."""
        lines = [f"{type(self).__name__} over {len(self.backends)} candidate(s):"]
        lines += [f"  - {b.describe()}" for b in self.backends]
        lines.append(f"performance validation {self.performance_validation_mode.value}: a candidate must beat eager "
                     f"by {self.min_speedup_threshold_percent:g}% (paired rounds, {1 - self.alpha:.0%} confidence)")
        return "\n".join(lines)

    def _say(self, line: str) -> None:
        if self.sink is not None:
            self.sink(line)

    @property
    def min_speedup_threshold_percent(self) -> float:
        """AITune's name for min_speedup_ratio, in percent."""
        return self.min_speedup_ratio * 100.0

    @property
    def performance_validation(self) -> bool:
        """Whether the comparison with eager takes part in the choice (the mode is ENABLED). In DIAGNOSTIC
        mode it is measured and reported (the verdict's intervals) but does not decide."""
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
        and add it to the recorded batch sizes (see aitune_ray.model.max_batch). limit: the largest batch tried
        (default: max_batch.CPU_LIMIT on the CPU). Off by default here, on in AITune's AOT workflow."""
        if not isinstance(enable, bool):
            raise ConfigError(f"enable_find_max_batch_size takes a bool, got {enable!r}")
        self.find_max_batch_size_enabled = enable
        self.find_max_batch_size_limit = check_limit(limit)
        return self

    @property
    def name(self) -> str:
        return type(self).__name__

    def rule(self) -> Rule:
        return Rule(self.min_speedup_ratio, self.noise_tolerance, self.alpha, self.performance_validation)

    def jobs(self, context: TuneContext | None = None) -> list[CandidateJob]:
        """The candidate jobs, each with its screening request in context's serving context (None: the
        screening's defaults, wherever it runs)."""
        screen = (context.timing("screen") if context is not None else
                  TimingRequest.paired("screen", "cpu", measure=self.measure_config))
        serving = context.serving.to_dict() if context is not None else {}
        rule = self.rule()
        return [CandidateJob(key=b.key(), spec=type(b).with_rule(b.spec(), rule), tolerance=self._tolerance_for(b),
                             measure=self.measure_config.to_dict(), priority=i, screen=screen.to_dict(),
                             context=serving)
                for i, b in enumerate(self.backends)]

    def _tolerance_for(self, backend: Backend) -> float | None:
        if isinstance(self.tolerance, dict):
            return self.tolerance.get(backend.name)
        return self.tolerance

    def tune(self, context: TuneContext, executor: Executor) -> ModuleReport:
        """Run the candidates through executor and fill a report; report.chosen is None for eager."""
        handle = executor.submit_early(context, self.jobs(context)) if self.overlap_baseline else None
        try:
            baseline = executor.baseline(context)
            if handle is None:
                handle = executor.submit(context, self.jobs(context))
            report = ModuleReport(module=context.name, strategy=self.name, device=str(context.device),
                                  call_mix=context.samples.call_mix(),
                                  baseline={bs: t.to_dict() for bs, t in baseline.items()})
            context.report = report
            self._decide(context, executor, handle, report)
        finally:
            if handle is not None:
                handle.cancel()
        logger.info("[%s] %s", context.name, report.decision)
        self._say(f"[{context.name}] {report.decision}")
        return report

    def _verdict(self, context: TuneContext, executor: Executor, report: ModuleReport, results: list[BuildResult],
                 *, max_finalists: int, dispatch: bool = False, family: int = 0,
                 objective: Objective | None = None) -> Verdict:
        """The decision procedure on results (ok, in this strategy's order), recorded in report."""
        by_key = {r.key: r for r in results}

        def confirm(finalists: list[str]) -> Session:
            session = executor.confirm(context, [by_key[k] for k in finalists])
            if session.context:
                report.measured_in = measured_in(session, context)
            if session.eager:
                report.remeasured_baseline = {bs: summary(ms, bs).to_dict() for bs, ms in session.eager.items()
                                              if bs != MIX}
            return session

        verdict = choose({r.key: r.screen for r in results}, confirm, report.call_mix, self.rule(),
                         max_finalists=max_finalists, dispatch=dispatch, order=list(by_key), family=family,
                         objective=objective)
        report.take_verdict(verdict, self.performance_validation_mode is PerformanceValidationMode.DIAGNOSTIC)
        return verdict

    @abstractmethod
    def _decide(self, context: TuneContext, executor: Executor, handle: RunHandle, report: ModuleReport) -> None:
        """Consume results from handle, append them to report.results and set report.chosen/decision."""


def measured_in(session: Session, context: TuneContext) -> str:
    """Where the session's figures hold ("cpu with 2 torch threads", "... in a Ray actor"), and, where its
    device type or thread count is not the serving context's, that it is not."""
    ran = ServingContext.from_dict(session.context)
    device = session.device or context.device
    asked = context.serving.describe(context.device, process=False)
    if context.serving.torch_threads and ran.describe(device, process=False) != asked:
        return f"{ran.describe(device)}, NOT the serving context ({asked}): the figures may not hold where it is served"
    return ran.describe(device)


def failures_text(results: list[BuildResult]) -> str:
    return "; ".join(f"{r.backend}: {r.status}" + (f" ({r.error})" if r.error else "") for r in results)

