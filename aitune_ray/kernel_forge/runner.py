"""Where a KernelOptimizer's work runs: a runner is injected into the optimizer, which keeps the search
and the choice rule (kernel_forge.selection) to itself.

ForgeRunner names the work: provider benchmarks, generator runs, the original function's timings and
the interleaved re-measure of finalists. LocalRunner does it in this process, one task after another
(generators run on their own futures beside the benchmarks), on the same forge tasks a Ray actor runs
(kernel_forge.tasks); aitune_ray.cluster.forge.RayForgeRunner spreads it over a RayExecutor's actors.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from concurrent.futures import Future
from typing import Iterable

from aitune_ray.records.failures import outcome
from aitune_ray.kernel_forge.evaluate import benchmark_provider, outcome_from_result
from aitune_ray.kernel_forge.function_samples import device_of
from aitune_ray.kernel_forge.records import OK, UNSUPPORTED, ProviderBenchmark
from aitune_ray.kernel_forge.tasks import ForgeTasks


class ForgeRunner:
    """The work of one search. open() before the first task, close() after the last (also on failure).
    opt is the KernelOptimizer searching, searches its FunctionSearch per function, jobs BenchmarkJobs.

    profile() makes the kernel profiler's trace (here: in this process); teardown_cupti: whether a profile
    made in this process detaches CUPTI after its CUDA trace (kernel_forge.profiler); a runner whose process
    is also a Ray driver says False, and makes a CUDA trace in a child process instead."""

    teardown_cupti = True

    def open(self, opt) -> None:
        pass

    def close(self) -> None:
        pass

    def cancel(self) -> None:
        """Stop a search running on another thread (it then raises; see the runner)."""

    def profile(self, opt, profiler, function, data, module):
        """profiler's profile of function over data (its rows and each function's samples), in this process."""
        return profiler.profile(function, data, module=module, warmup_iterations=opt.warmup_iterations,
                                teardown_cupti=self.teardown_cupti)

    def benchmark(self, opt, jobs: list,
                  searches: dict) -> Iterable[ProviderBenchmark]:
        """Benchmark each (function, provider) job on its function's samples; records in any order."""
        raise NotImplementedError

    def submit_generators(self, opt, searches: dict,
                          functions: list[str]) -> list:
        """Start every generator that supports one of functions; the returned tasks go to collect_generated."""
        raise NotImplementedError

    def collect_generated(self, opt, searches: dict, tasks: list) -> None:
        """Wait for the generators (each under opt.generation_timeout from its submission) and benchmark
        what they made (opt.take_generated / opt.generation_failed)."""
        raise NotImplementedError

    def originals(self, opt, search,
                  where: set[tuple]) -> dict[tuple, ProviderBenchmark]:
        """The original function timed on each (node, gpu) in where that can still be reached."""
        raise NotImplementedError

    def interleaved(self, opt, search,
                    finalists: list[ProviderBenchmark]) -> dict | None:
        """The original and the finalists timed in turn on one device (the forge's interleaved output),
        or None when that failed."""
        raise NotImplementedError


@dataclasses.dataclass
class _Generation:
    function: str
    generator: str
    future: Future
    submitted: float
    deadline: float


class LocalRunner(ForgeRunner):
    """Everything in this process, on the samples' own device."""

    def __init__(self):
        self.tasks = ForgeTasks({})

    def close(self) -> None:
        self.tasks.clear()

    def _box(self, search) -> tuple:
        return (id(search), search.function), lambda: search.data

    def benchmark(self, opt, jobs, searches):
        """The forge's benchmark task, as an actor runs it; a live (generated) provider is benchmarked as it
        is, so that its record keeps it."""
        for job in jobs:
            search = searches[job.function]
            if isinstance(job.provider, dict):
                yield ProviderBenchmark.from_dict(self.tasks.benchmark(
                    self._box(search), device_of(search.unique), job.function, job.provider, opt.tolerance,
                    opt.measure.to_dict(), job.source))
                continue
            yield benchmark_provider(job.function, job.provider, search.data, references=search.references,
                                     tolerance=opt.tolerance, measure_config=opt.measure, source=job.source)

    def submit_generators(self, opt, searches, functions):
        tasks = []
        for fn in functions:
            search = searches[fn]
            for generator in [g for g in opt.kernel_generators if fn in opt.functions_of(g)]:
                try:
                    if not generator.prepare(fn, search.unique):
                        opt.generation_failed(search, generator.name, UNSUPPORTED,
                                              "the generator does not support these samples")
                        continue
                    submitted = time.monotonic()
                    future = generator.submit(fn, search.unique)
                    tasks.append(_Generation(fn, generator.name, future, submitted, submitted + opt.generation_timeout))
                except Exception as exc:  # noqa: BLE001 - one generator cannot stop the search
                    failure = outcome("submission", exc=exc)
                    opt.generation_failed(search, generator.name, failure.status, failure.error)
        return tasks

    def collect_generated(self, opt, searches, tasks):
        pending = {task.future: task for task in tasks}
        while pending:
            now = time.monotonic()
            for future, task in list(pending.items()):
                if not future.done() and now >= task.deadline:
                    future.cancel()
                    del pending[future]
                    failure = outcome("generation", timed_out=True, limit_s=opt.generation_timeout)
                    opt.generation_failed(searches[task.function], task.generator, failure.status, failure.error,
                                          now - task.submitted)
            if not pending:
                break
            wait_s = max(0.0, min(task.deadline for task in pending.values()) - now)
            done, _ = concurrent.futures.wait(list(pending), timeout=wait_s,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                task = pending.pop(future)
                search, seconds = searches[task.function], time.monotonic() - task.submitted
                try:
                    result = future.result()
                except Exception as exc:  # noqa: BLE001 - one generation cannot stop the search
                    failure = outcome("generation", exc=exc)
                    opt.generation_failed(search, task.generator, failure.status, failure.error, seconds)
                    continue
                generated = outcome_from_result(task.function, task.generator, result, seconds)
                opt.take_generated(search, generated, generated.live if generated.status == OK else None)

    def originals(self, opt, search, where):
        record = ProviderBenchmark.from_dict(self.tasks.original(self._box(search), device_of(search.unique),
                                                                 search.function, opt.measure.to_dict()))
        search.records.append(record)
        return {(record.node, record.gpu): record} if record.ok else {}

    def interleaved(self, opt, search, finalists):
        try:
            return self.tasks.interleaved(self._box(search), device_of(search.unique), search.function,
                                          [r.provider for r in finalists], opt.final_rounds)
        except Exception:  # noqa: BLE001 - then nothing is kept, as when a worker cannot re-measure
            import logging

            logging.getLogger(__name__).warning("the interleaved re-measure of %s failed", search.function,
                                                exc_info=True)
            return None
