"""KernelOptimizer: profile once, try every kernel source on the functions that matter, keep winners.

make_plan(function, data, module=...):
  1. profile the module once (ModuleFunctionKernelProfiler);
  2. pick, per source kind, the functions over its time-share threshold;
  3. submit every generator first, then benchmark the static providers while they run;
  4. collect generated providers as they finish; each generation has generation_timeout seconds
     counted from its submission;
  5. every candidate goes through the same benchmark_provider: prepare, validate on every distinct
     sample, time the GCD-reduced call mix;
  6. per function, the decision procedure (kernel_forge.selection, aitune_ray.decision): speedups against
     the original on each candidate's own GPU rank them; the best few are confirmed beside the original in
     paired shuffled rounds at every recorded shape on one device, and kept only when accepted (faster over
     the function's call mix, not slower at any recorded shape).
Steps 1-2 are profile_functions(), on the calling thread (the profiler is best run on the thread that
owns it); steps 3-6 are search(), which an executor may run on a thread of its own. Where the tasks of
steps 3-6 run is the injected runner's business (kernel_forge.runner: LocalRunner here, RayForgeRunner
on a RayExecutor's actors); the search and the choice are the same for every runner.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from torch import nn

from aitune_ray.decision.rule import Rule
from aitune_ray.decision.screen import MAX_FINALISTS
from aitune_ray.decision.session import CONFIRM_ROUNDS
from aitune_ray.errors import ConfigError
from aitune_ray.kernel_forge.evaluate import KERNEL_MEASURE, reference_outputs
from aitune_ray.kernel_forge.function_samples import FunctionData
from aitune_ray.kernel_forge.kernel_provider.kernel_generator import KernelGenerator
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import KernelProvider, kernel_provider_from_dict
from aitune_ray.kernel_forge.kernel_utils import KernelUtils, check_kernel_utils
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan
from aitune_ray.kernel_forge.profiler import ModuleFunctionKernelProfiler
from aitune_ray.kernel_forge.records import ERROR, OK, GenerationOutcome, ProviderBenchmark
from aitune_ray.kernel_forge.runner import ForgeRunner, LocalRunner
from aitune_ray.kernel_forge.selection import choose
from aitune_ray.measure.timing import MeasureConfig

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

#: Six hours, as AITune, or AITUNE_KERNEL_GENERATION_TIMEOUT (seconds) where it is set when this is imported, as
#: AITune reads it: generators may run long searches.
DEFAULT_GENERATION_TIMEOUT = float(os.environ.get("AITUNE_KERNEL_GENERATION_TIMEOUT", 6 * 3600.0))
SUMMARY_LIMIT = 100


@dataclasses.dataclass
class FunctionSearch:
    """One function's samples, reference outputs and candidate records."""

    function: str
    data: FunctionData
    references: list
    records: list[ProviderBenchmark] = dataclasses.field(default_factory=list)

    @property
    def unique(self) -> list:
        return [s for _, s in self.data]


@dataclasses.dataclass
class ProfiledFunctions:
    """What profiling chose to search: per function its search, and which source kinds apply."""

    searches: dict[str, FunctionSearch]
    provider_functions: list[str]
    generator_functions: list[str]


@dataclasses.dataclass
class BenchmarkJob:
    """One (function, provider) pair to benchmark: the provider's to_dict(), or a live generated one."""

    function: str
    provider: dict | KernelProvider
    source: str


def _as_list(value: Any, kind: type) -> list:
    if value is None:
        return []
    if isinstance(value, kind):
        return [value]
    return list(value)


def check_percent(value: float, name: str) -> float:
    if not 0.0 <= float(value) <= 100.0:
        raise ConfigError(f"{name} must be between 0 and 100, not {value}")
    return float(value)


class KernelOptimizer:
    """Finds, per profiled torch.nn.functional function, the fastest valid replacement.

    tolerance: one relative L2 bound for every candidate (None: each provider's own, by dtype).
    measure: how each candidate's call mix is timed (for ranking). final_rounds: paired rounds per recorded
    shape of the confirm session (default: the backends' confirm sessions' own, decision.session.CONFIRM_ROUNDS;
    0: none, and the original stays); max_finalists: candidates confirmed per function at most
    (kernel_forge.selection). rule: the accept rule (decision.rule.Rule: min_speedup_ratio, noise_tolerance,
    alpha), the strategy's where a strategy tunes (default: the rule's defaults). warmup_iterations: unprofiled passes over the data first.
    kernel_utils: AITune's option, accepted as its default KernelUtils() only (see kernel_forge.kernel_utils).
    kernel_profiler_factory: makes the profiler, given function_names. runner: where the benchmarks,
    generators and timings run (default: LocalRunner, in this process).
    After make_plan: summary (the profile per function), records (every candidate) and outcomes
    (every generation).
    """

    def __init__(self, kernel_providers: KernelProvider | list[KernelProvider] | None = None,
                 kernel_generators: KernelGenerator | list[KernelGenerator] | None = None,
                 provider_min_time_share_percent: float = 0.0, generator_min_time_share_percent: float = 10.0,
                 generation_timeout: float = DEFAULT_GENERATION_TIMEOUT, *, tolerance: float | None = None,
                 measure: MeasureConfig | None = None, final_rounds: int = CONFIRM_ROUNDS, warmup_iterations: int = 3,
                 kernel_profiler_factory: Callable[..., ModuleFunctionKernelProfiler] = ModuleFunctionKernelProfiler,
                 max_finalists: int = MAX_FINALISTS, runner: ForgeRunner | None = None,
                 kernel_utils: KernelUtils | None = None, rule: Rule | None = None):
        check_kernel_utils(kernel_utils)   # AITune's option: only its default is meaningful here
        self.kernel_providers: list[KernelProvider] = _as_list(kernel_providers, KernelProvider)
        self.kernel_generators: list[KernelGenerator] = _as_list(kernel_generators, KernelGenerator)
        self.provider_min_time_share_percent = check_percent(provider_min_time_share_percent,
                                                             "provider_min_time_share_percent")
        self.generator_min_time_share_percent = check_percent(generator_min_time_share_percent,
                                                              "generator_min_time_share_percent")
        if generation_timeout < 0:
            raise ConfigError("generation_timeout must be at least 0")
        self.generation_timeout = float(generation_timeout)
        self.tolerance = tolerance
        self.measure = measure or KERNEL_MEASURE
        if int(final_rounds) < 0:
            raise ConfigError(f"final_rounds must not be negative, got {final_rounds}")
        self.final_rounds = int(final_rounds)
        self.rule = Rule.from_settings(rule.settings()) if rule is not None else Rule()
        self.warmup_iterations = warmup_iterations
        self.kernel_profiler_factory = kernel_profiler_factory
        self.max_finalists = int(max_finalists)
        self.runner = runner or LocalRunner()
        self.summary: pd.DataFrame | None = None
        self.records: list[ProviderBenchmark] = []
        self.outcomes: list[GenerationOutcome] = []

    # ----- selection -------------------------------------------------------------------------------
    @staticmethod
    def functions_of(source: KernelProvider | KernelGenerator) -> list[str]:
        if isinstance(source, KernelProvider):
            return [source.supported_function]
        return list(source.supports_functions())

    def supported_functions(self) -> set[str]:
        return {fn for source in [*self.kernel_providers, *self.kernel_generators] for fn in self.functions_of(source)}

    @classmethod
    def select_functions(cls, summary: pd.DataFrame, sources: list, min_time_share_percent: float) -> list[str]:
        """Functions in summary that a source supports and that take at least min_time_share_percent."""
        if summary is None or summary.empty or not sources:
            return []
        supported = {fn for source in sources for fn in cls.functions_of(source)}
        chosen = summary["function_name"].isin(supported) & (summary["time_spent_pct"] >= min_time_share_percent)
        return summary.loc[chosen, "function_name"].tolist()

    # ----- the search ---------------------------------------------------------------------------------
    def make_plan(self, function: Callable, data: Sequence | None = None, *,
                  module: nn.Module | None = None) -> KernelOptimizationPlan:
        return self.search(self.profile_functions(function, data, module=module))

    def profile_functions(self, function: Callable, data: Sequence | None = None, *,
                          module: nn.Module | None = None) -> ProfiledFunctions:
        """Profile once and choose the functions to search, with their samples and reference outputs."""
        if module is None and isinstance(function, nn.Module):
            module = function
        if module is None:
            raise ValueError("module must be given when function is not an nn.Module")
        self.records, self.outcomes, self.summary = [], [], None
        if not self.kernel_providers and not self.kernel_generators:
            logger.info("no kernel providers or generators: empty kernel plan")
            return ProfiledFunctions({}, [], [])
        profiler = self.kernel_profiler_factory(function_names=self.supported_functions())
        frame, function_data = self.runner.profile(self, profiler, function, data, module)
        self.summary = profiler.describe_results(frame, function_data, SUMMARY_LIMIT)
        provider_fns = [f for f in self.select_functions(self.summary, self.kernel_providers,
                                                         self.provider_min_time_share_percent) if f in function_data]
        generator_fns = [f for f in self.select_functions(self.summary, self.kernel_generators,
                                                          self.generator_min_time_share_percent) if f in function_data]
        self._log_summary(provider_fns, generator_fns)
        wanted = set(provider_fns) | set(generator_fns)
        chosen = [f for f in self.summary["function_name"] if f in wanted]
        searches = {fn: FunctionSearch(fn, function_data[fn], reference_outputs(fn, [s for _, s in function_data[fn]]))
                    for fn in chosen}
        return ProfiledFunctions(searches, provider_fns, generator_fns)

    def search(self, profiled: ProfiledFunctions) -> KernelOptimizationPlan:
        """Run every source on the profiled functions and keep the winners."""
        searches = profiled.searches
        if not searches:
            return KernelOptimizationPlan()
        self.runner.open(self)
        try:
            tasks = self.runner.submit_generators(self, searches, profiled.generator_functions)
            self._benchmark_providers(searches, profiled.provider_functions)
            self.runner.collect_generated(self, searches, tasks)
            winners = [w for w in (self._choose(search) for search in searches.values()) if w is not None]
        finally:
            self.runner.close()
        self.records = [r for search in searches.values() for r in search.records]
        self._log_results()
        return KernelOptimizationPlan(tuple(winners), tuple(r.to_dict() for r in self.records))

    def cancel(self) -> None:
        """Stop a search running on another thread (through its runner)."""
        self.runner.cancel()

    def _benchmark_providers(self, searches: dict[str, FunctionSearch], functions: list[str]) -> None:
        jobs: list[BenchmarkJob] = []
        for fn in functions:
            for provider in [p for p in self.kernel_providers if p.supported_function == fn]:
                try:
                    jobs.append(BenchmarkJob(fn, provider.to_dict(), "provider"))
                except Exception as exc:  # noqa: BLE001 - the provider's own serialization bug
                    searches[fn].records.append(ProviderBenchmark(fn, repr(provider), ERROR, error=(
                        f"to_dict failed: {type(exc).__name__}: {exc}")))
        self._take(searches, self.run_benchmarks(jobs, searches))

    def run_benchmarks(self, jobs: list[BenchmarkJob],
                       searches: dict[str, FunctionSearch]) -> Iterable[ProviderBenchmark]:
        """Benchmark each (function, provider) job on its function's samples, through the runner; records
        in any order. A job's provider is its to_dict() (a live provider only for generated ones, which
        have to_dict() too); records may come back as plain data (no ``live`` provider)."""
        return self.runner.benchmark(self, jobs, searches)

    def _take(self, searches: dict[str, FunctionSearch], records: Iterable[ProviderBenchmark]) -> None:
        for record in records:
            searches[record.function].records.append(record)
            level = logging.WARNING if record.status == ERROR else logging.INFO
            logger.log(level, "%s for %s: %s%s", record.description, record.function, record.status,
                       f" ({record.error})" if record.error else f", {record.median_ms:.4g} ms")

    def take_generated(self, search: FunctionSearch, outcome: GenerationOutcome, live: KernelProvider | None,
                       where: dict | None = None) -> None:
        """A generator finished: record its outcome; benchmark what it made (live, else its to_dict())."""
        self.outcomes.append(outcome)
        if outcome.status != OK:
            where = where or {}
            search.records.append(ProviderBenchmark(search.function, outcome.description or outcome.generator,
                                                    outcome.status, source=f"generator:{outcome.generator}",
                                                    error=outcome.error, seconds=outcome.seconds,
                                                    gpu=where.get("gpu", ""), node=where.get("node", "")))
            logger.warning("%s produced no candidate for %s: %s", outcome.generator, search.function, outcome.error)
            return
        job = BenchmarkJob(search.function, live if live is not None else outcome.provider,
                           f"generator:{outcome.generator}")
        self._take({search.function: search}, self.run_benchmarks([job], {search.function: search}))

    def generation_failed(self, search: FunctionSearch, generator: str, status: str, error: str,
                           seconds: float = 0.0) -> None:
        self.outcomes.append(GenerationOutcome(search.function, generator, status, error=error, seconds=seconds))
        search.records.append(ProviderBenchmark(search.function, generator, status, source=f"generator:{generator}",
                                                error=error, seconds=seconds))
        logger.warning("%s for %s: %s: %s", generator, search.function, status, error)

    def _choose(self, search: FunctionSearch) -> KernelProvider | None:
        """The choice rule (kernel_forge.selection) on this function's records, with the runner's timings."""
        valid = [r for r in search.records if r.ok and r.median_ms is not None]
        if not valid:
            return None
        originals = self.runner.originals(self, search, {(r.node, r.gpu) for r in valid})

        def confirm(finalists: list[ProviderBenchmark]) -> dict | None:
            out = self.runner.interleaved(self, search, finalists)
            if out is not None:
                logger.info("confirm session of the original %s and %d finalist(s) on %s", search.function,
                            len(finalists), out.get("gpu") or "this device")
            return out

        best = choose(search.function, search.records, originals, confirm if self.final_rounds > 0 else None,
                      self.rule, max_finalists=self.max_finalists)
        if best is None:
            return None
        return best.live if best.live is not None else kernel_provider_from_dict(best.provider)

    # ----- reporting --------------------------------------------------------------------------------
    def _log_summary(self, provider_fns: list[str], generator_fns: list[str]) -> None:
        import pandas as pd

        if self.summary.empty:
            logger.info("kernel profile: no torch.nn.functional call inside the module took measurable time")
            return
        table = self.summary.copy()
        table["provider"] = table["function_name"].isin(provider_fns).map({True: "yes", False: ""})
        table["generator"] = table["function_name"].isin(generator_fns).map({True: "yes", False: ""})
        with pd.option_context("display.max_columns", None, "display.width", 200):
            logger.info("kernel profile:\n%s", table.round(2).to_string(index=False))

    def _log_results(self) -> None:
        import pandas as pd

        if not self.records:
            return
        plan = KernelOptimizationPlan((), tuple(r.to_dict() for r in self.records))
        with pd.option_context("display.max_columns", None, "display.width", 200, "display.max_colwidth", 80):
            logger.info("kernel candidates:\n%s", plan.results_frame().to_string(index=False))
