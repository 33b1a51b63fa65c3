"""KernelOptimizer: profile once, try every kernel source on the functions that matter, keep winners.

make_plan(function, data, module=...):
  1. profile the module once (ModuleFunctionKernelProfiler);
  2. pick, per source kind, the functions over its time-share threshold;
  3. submit every generator first, then benchmark the static providers while they run;
  4. collect generated providers as they finish; each generation has generation_timeout seconds
     counted from its submission;
  5. every candidate goes through the same benchmark_provider: prepare, validate on every distinct
     sample, time the GCD-reduced call mix;
  6. per function, the fastest valid candidate is re-timed against the original function side by side
     (A B A B ...) and kept only if it is faster.
Steps 1-2 are profile_functions(), on the calling thread (the profiler is best run on the thread that
owns it); steps 3-6 are search(), which an executor may run on a thread of its own.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import torch.nn.functional as F
from torch import nn

from aitune_ray.errors import ConfigError
from aitune_ray.kernel_forge.evaluate import (
    KERNEL_MEASURE, benchmark_original, benchmark_provider, outcome_from_result, reference_outputs)
from aitune_ray.kernel_forge.function_samples import FunctionData, benchmark_mix, device_of, fresh_copy
from aitune_ray.kernel_forge.kernel_provider.kernel_generator import KernelGenerator
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import KernelProvider, kernel_provider_from_dict
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan
from aitune_ray.kernel_forge.profiler import ModuleFunctionKernelProfiler
from aitune_ray.kernel_forge.records import ERROR, OK, TIMED_OUT, UNSUPPORTED, GenerationOutcome, ProviderBenchmark
from aitune_ray.measure.timing import MeasureConfig, measure_interleaved

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

#: Six hours, as AITune: generators may run long searches.
DEFAULT_GENERATION_TIMEOUT = 6 * 3600.0
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


@dataclasses.dataclass
class _Task:
    function: str
    generator: str
    future: Future
    submitted: float
    deadline: float


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
    measure: how each candidate's call mix is timed. final_rounds: rounds of the closing side-by-side
    timing of the original and every valid candidate (0: decide on the separate medians).
    warmup_iterations: unprofiled passes over the data first. kernel_profiler_factory: makes the
    profiler, given function_names.
    After make_plan: summary (the profile per function), records (every candidate) and outcomes
    (every generation).
    """

    def __init__(self, kernel_providers: KernelProvider | list[KernelProvider] | None = None,
                 kernel_generators: KernelGenerator | list[KernelGenerator] | None = None,
                 provider_min_time_share_percent: float = 0.0, generator_min_time_share_percent: float = 10.0,
                 generation_timeout: float = DEFAULT_GENERATION_TIMEOUT, *, tolerance: float | None = None,
                 measure: MeasureConfig | None = None, final_rounds: int = 20, warmup_iterations: int = 2,
                 kernel_profiler_factory: Callable[..., ModuleFunctionKernelProfiler] = ModuleFunctionKernelProfiler):
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
        self.final_rounds = int(final_rounds)
        self.warmup_iterations = warmup_iterations
        self.kernel_profiler_factory = kernel_profiler_factory
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
        frame, function_data = profiler.profile(function, data, module=module,
                                                warmup_iterations=self.warmup_iterations)
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
        tasks = self._submit_generators(searches, profiled.generator_functions)
        self._benchmark_providers(searches, profiled.provider_functions)
        self._collect_generated(searches, tasks)
        winners = [w for w in (self._choose(search) for search in searches.values()) if w is not None]
        self.records = [r for search in searches.values() for r in search.records]
        self._log_results()
        return KernelOptimizationPlan(tuple(winners), tuple(r.to_dict() for r in self.records))

    def _submit_generators(self, searches: dict[str, FunctionSearch], functions: list[str]) -> list[_Task]:
        tasks = []
        for fn in functions:
            search = searches[fn]
            for generator in [g for g in self.kernel_generators if fn in self.functions_of(g)]:
                name = generator.name
                try:
                    if not generator.prepare(fn, search.unique):
                        self._generation_failed(search, name, UNSUPPORTED, "the generator does not support these "
                                                                           "samples")
                        continue
                    submitted = time.monotonic()
                    future = generator.submit(fn, search.unique)
                    tasks.append(_Task(fn, name, future, submitted, submitted + self.generation_timeout))
                    logger.info("submitted %s for %s", name, fn)
                except Exception as exc:  # noqa: BLE001 - one generator cannot stop the search
                    self._generation_failed(search, name, ERROR, f"submission failed: {type(exc).__name__}: {exc}")
        return tasks

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
        """Benchmark each (function, provider) job on its function's samples; records in any order.

        Here: one after another in this process. An executor that spreads the jobs over devices
        overrides this: a job's provider is its to_dict() (a live provider only for generated ones,
        which have to_dict() too), the samples and references are tensors, and the records are plain
        data (their ``live`` provider is then rebuilt from ``provider`` for the side-by-side check).
        """
        for job in jobs:
            search = searches[job.function]
            yield benchmark_provider(job.function, job.provider, search.data, references=search.references,
                                     tolerance=self.tolerance, measure_config=self.measure, source=job.source)

    def _take(self, searches: dict[str, FunctionSearch], records: Iterable[ProviderBenchmark]) -> None:
        for record in records:
            searches[record.function].records.append(record)
            level = logging.WARNING if record.status == ERROR else logging.INFO
            logger.log(level, "%s for %s: %s%s", record.description, record.function, record.status,
                       f" ({record.error})" if record.error else f", {record.median_ms:.4g} ms")

    def _collect_generated(self, searches: dict[str, FunctionSearch], tasks: list[_Task]) -> None:
        pending = {task.future: task for task in tasks}
        while pending:
            now = time.monotonic()
            for future, task in list(pending.items()):
                if not future.done() and now >= task.deadline:
                    future.cancel()
                    del pending[future]
                    self._generation_failed(searches[task.function], task.generator, TIMED_OUT,
                                            f"no result {self.generation_timeout:g} s after submission",
                                            now - task.submitted)
            if not pending:
                break
            wait_s = max(0.0, min(task.deadline for task in pending.values()) - now)
            done, _ = concurrent.futures.wait(list(pending), timeout=wait_s,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                task = pending.pop(future)
                self._take_generated(searches[task.function], task, future)

    def _take_generated(self, search: FunctionSearch, task: _Task, future: Future) -> None:
        seconds = time.monotonic() - task.submitted
        try:
            result = future.result()
        except Exception as exc:  # noqa: BLE001 - one generation cannot stop the search
            self._generation_failed(search, task.generator, ERROR, f"generation failed: {type(exc).__name__}: {exc}",
                                    seconds)
            return
        outcome = outcome_from_result(task.function, task.generator, result, seconds)
        self.outcomes.append(outcome)
        if outcome.status != OK:
            search.records.append(ProviderBenchmark(task.function, outcome.description or task.generator,
                                                    outcome.status, source=f"generator:{task.generator}",
                                                    error=outcome.error, seconds=seconds))
            logger.warning("%s produced no candidate for %s: %s", task.generator, task.function, outcome.error)
            return
        self._take({search.function: search},
                   self.run_benchmarks([BenchmarkJob(task.function, outcome.live, f"generator:{task.generator}")],
                                       {search.function: search}))

    def _generation_failed(self, search: FunctionSearch, generator: str, status: str, error: str,
                           seconds: float = 0.0) -> None:
        self.outcomes.append(GenerationOutcome(search.function, generator, status, error=error, seconds=seconds))
        search.records.append(ProviderBenchmark(search.function, generator, status, source=f"generator:{generator}",
                                                error=error, seconds=seconds))
        logger.warning("%s for %s: %s: %s", generator, search.function, status, error)

    def _choose(self, search: FunctionSearch) -> KernelProvider | None:
        """The fastest valid candidate, if it beats the original function."""
        valid = [r for r in search.records if r.ok and r.median_ms is not None]
        if not valid:
            return None
        original = benchmark_original(search.function, search.data, measure_config=self.measure)
        search.records.append(original)
        if not original.ok:
            logger.warning("the original %s could not be timed: %s", search.function, original.error)
            return None
        for record in valid:
            record.speedup = original.median_ms / record.median_ms if record.median_ms else None
        if self.final_rounds > 0:
            for record in [r for r in valid if r.live is None]:  # a record from another process
                try:
                    record.live = kernel_provider_from_dict(record.provider)
                except Exception as exc:  # noqa: BLE001
                    record.status, record.error = ERROR, f"cannot be recreated here: {type(exc).__name__}: {exc}"
                    valid.remove(record)
            if not valid:
                return None
            try:
                self._side_by_side(search, original, valid)
            except Exception as exc:  # noqa: BLE001 - keep the separate medians
                logger.warning("side-by-side timing of %s failed (%s: %s); deciding on separate medians",
                               search.function, type(exc).__name__, exc)
        best = select_best(valid, search.function)
        if best is None:
            return None
        return best.live if best.live is not None else kernel_provider_from_dict(best.provider)

    def _side_by_side(self, search: FunctionSearch, original: ProviderBenchmark,
                      valid: list[ProviderBenchmark]) -> None:
        """Re-time the original and every valid candidate in turn (A B C A B C ...) on the same inputs,
        after generation has finished, so that all of them see the same conditions; set their speedups."""
        mix = benchmark_mix(search.data)
        copies = {id(s): fresh_copy(s) for s in mix}
        calls = [copies[id(s)] for s in mix]

        def run(fn):
            return lambda: [fn(*a, **k) for a, k in calls]

        fns = {"original": run(getattr(F, search.function))}
        fns.update({str(i): run(r.live) for i, r in enumerate(valid)})
        timings = measure_interleaved(fns, device_of(search.unique), len(calls), rounds=self.final_rounds)
        base = timings["original"].median_ms
        original.median_ms, original.cv = base, timings["original"].cv
        for i, record in enumerate(valid):
            t = timings[str(i)]
            record.median_ms, record.cv = t.median_ms, t.cv
            record.speedup = base / max(t.median_ms, 1e-9)

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


def select_best(valid: list, function: str):
    """The fastest valid candidate, marked selected, if it beats the original function; else None."""
    best = max(valid, key=lambda r: r.speedup or 0.0)
    if (best.speedup or 0.0) <= 1.0:
        logger.info("no candidate beats the original %s (best: %s, %.2fx)", function, best.description,
                    best.speedup or 0.0)
        return None
    best.selected = True
    return best
