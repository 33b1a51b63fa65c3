"""RayKernelOptimizer: the kernel forge's search spread over a RayExecutor's GPU actors.

The driver profiles once (KernelOptimizer.profile_functions, as inline) and puts each selected function's
recorded samples in the object store once (on the CPU). Then, as actor tasks (TunerActor.forge):

- every generator runs on an actor; its generation_timeout counts from that task's submission, and a
  generator still running at its deadline has its actor killed and replaced; every other result is kept.
  Generators leave at least one actor to the benchmarks when there are two or more;
- every (function, provider) pair is benchmarked on whichever actor is idle (benchmark_provider on that
  actor's GPU, against reference outputs computed there); a generated provider is benchmarked the same way
  as soon as it arrives;
- per function, the original is timed on each GPU that measured a valid candidate, and each candidate's
  speedup is taken against the original on its own GPU. When the best wins by less than remeasure_margin,
  or candidates within that margin of it were measured on different GPUs, the original and those finalists
  are re-measured interleaved (A B A B ...) on one actor, and the choice is made among them on those
  numbers (nothing is kept when that re-measure fails).

Every record names the GPU and node its numbers came from, and its re-measure where there was one
(ProviderBenchmark.remeasured). Only plain data crosses: function names, to_dict() of providers and
generators, CPU FunctionData (once per function), record dicts back. A driver without CUDA tuning for
CUDA actors profiles on its CPU: the time shares then come from CPU kernels.

KernelSelectorBackend on Ray (PlanRun): when a RayExecutor batch holds a KernelSelectorBackend job whose
spec carries no plan, the driver makes that plan first with RayKernelOptimizer: it profiles on the thread
that consumes the batch, then searches on a thread of its own; the batch's plain backend builds run on
the actors meanwhile, and the forge's tasks get each idle actor before them. The job's spec then carries
the finished plan (KernelSelectorBackend.spec_with_plan) and goes to an actor like any other job, which
builds the composite without profiling again. Jobs of one batch with the same kernel-selection config
(KernelSelectorBackend.plan_key; they differ in their delegate) share one PlanRun, so one profile and one
search. The tasks themselves run through forge_tasks.Scheduler.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Iterable

import torch

from aitune_ray.backend.backend import Backend
from aitune_ray.backend.kernel_selector_backend import KernelSelectorBackend
from aitune_ray.cluster.forge_tasks import Cancelled, Scheduler, Work
from aitune_ray.kernel_forge.function_samples import FunctionSample, device_of
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import KernelProvider, kernel_provider_from_dict
from aitune_ray.kernel_forge.optimizer import (BenchmarkJob, FunctionSearch, KernelOptimizer, ProfiledFunctions,
                                             select_best)
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan
from aitune_ray.kernel_forge.records import ERROR, OK, GenerationOutcome, ProviderBenchmark
from aitune_ray.results import BuildResult, CandidateJob
from aitune_ray.samples import move

logger = logging.getLogger(__name__)

#: A provider winning by less than this fraction is re-measured interleaved on one GPU before it is kept.
REMEASURE_MARGIN = 0.05


def finalists_to_remeasure(valid: list[ProviderBenchmark], margin: float = REMEASURE_MARGIN,
                           unmatched: Iterable[int] = ()) -> list[ProviderBenchmark]:
    """The candidates to re-measure interleaved on one GPU before choosing, best first; [] when the raw
    numbers decide. valid: records with speedups against the original on their own GPU. The best is
    re-measured when its win is under margin (with every candidate within margin of it); candidates within
    margin of the best are re-measured together when they came from different GPUs, or when one of them
    (an id() in unmatched) had no original timed on its own GPU."""
    ranked = sorted((r for r in valid if r.speedup is not None), key=lambda r: r.speedup, reverse=True)
    if not ranked or ranked[0].speedup <= 1.0:
        return []
    best = ranked[0]
    close = [r for r in ranked if r.speedup * (1.0 + margin) >= best.speedup]
    unmatched = set(unmatched)
    if best.speedup < 1.0 + margin or len({(r.node, r.gpu) for r in close}) > 1 \
            or any(id(r) in unmatched for r in close):
        return close
    return []


# ----- the optimizer ---------------------------------------------------------------------------------------

def _provider_name(spec: dict | KernelProvider) -> str:
    if isinstance(spec, KernelProvider):
        return spec.name
    try:
        return kernel_provider_from_dict(spec).name
    except Exception:  # noqa: BLE001 - the actor will report why it cannot be made
        return str(spec.get("type", "?"))


class RayKernelOptimizer(KernelOptimizer):
    """KernelOptimizer whose benchmarks, generators and timings run as tasks on executor's actors.

    executor: a RayExecutor (opened here if it is not yet). intent: "cuda" or "cpu", the device kind the
    actors use (None: the recorded samples' device). remeasure_margin: see finalists_to_remeasure;
    final_rounds is the number of interleaved rounds (0: decide on the separate medians). on_queue: called
    once, when the first tasks (generators, provider benchmarks) are queued. context: the module's
    TuneContext, when each task should be a progress event of the executor.
    """

    def __init__(self, *args: Any, executor, intent: str | None = None, remeasure_margin: float = REMEASURE_MARGIN,
                 on_queue: Callable[[], None] | None = None, context=None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.executor = executor
        self.context = context
        self.intent = intent
        self.remeasure_margin = float(remeasure_margin)
        self.on_queue = on_queue
        self._cancelled = threading.Event()
        self._scheduler: Scheduler | None = None
        self._boxes: dict[str, list] = {}

    def cancel(self) -> None:
        """Stop a search running on another thread: it raises Cancelled."""
        self._cancelled.set()

    def search(self, profiled: ProfiledFunctions) -> KernelOptimizationPlan:
        self.executor.open()
        self._scheduler = Scheduler(self.executor, self.generation_timeout, self._cancelled, self.context)
        self._boxes = {}
        try:
            return super().search(profiled)
        finally:
            self._scheduler.close()
            self._scheduler, self._boxes = None, {}

    # ----- plain data out ---------------------------------------------------------------------------
    def _box(self, search: FunctionSearch) -> list:
        box = self._boxes.get(search.function)
        if box is None:
            if self.intent is None:
                self.intent = "cuda" if device_of(search.unique).type == "cuda" else "cpu"
            data = [(count, FunctionSample(*move((sample.args, sample.kwargs), "cpu")))
                    for count, sample in search.data]
            box = self._boxes[search.function] = [self.executor._put(data)]
        return box

    def _submit(self, work: Work) -> Work:
        return self._scheduler.submit(work)

    def _queued(self) -> None:
        """The first batch of tasks (generators, then provider benchmarks) is queued: tell on_queue, once."""
        if self.on_queue is not None:
            callback, self.on_queue = self.on_queue, None
            callback()

    def _work(self, method: str, search: FunctionSearch, label: str, *args: Any, **options: Any) -> Work:
        box = self._box(search)
        return self._submit(Work(method, (box, self.intent, search.function, *args), search.function, label,
                                 **options))

    # ----- benchmarks and generators -------------------------------------------------------------------
    def run_benchmarks(self, jobs: list[BenchmarkJob],
                       searches: dict[str, FunctionSearch]) -> Iterable[ProviderBenchmark]:
        works = {}
        for job in jobs:
            spec = job.provider if isinstance(job.provider, dict) else job.provider.to_dict()
            work = self._work("benchmark", searches[job.function], _provider_name(job.provider), spec,
                              self.tolerance, self.measure.to_dict(), job.source)
            works[work] = (job, spec)
        self._queued()
        for work in self._scheduler.wait(list(works)):
            job, spec = works[work]
            if work.status == OK:
                yield ProviderBenchmark.from_dict(work.out)
            else:
                yield ProviderBenchmark(job.function, work.label, work.status, provider=spec, source=job.source,
                                        error=work.error, gpu=work.where.get("gpu", ""),
                                        node=work.where.get("node", ""), seconds=work.seconds)

    def _submit_generators(self, searches: dict[str, FunctionSearch], functions: list[str]) -> list[Work]:
        works = []
        for fn in functions:
            for generator in [g for g in self.kernel_generators if fn in self.functions_of(g)]:
                try:
                    spec = generator.to_dict()
                except Exception as exc:  # noqa: BLE001 - the generator's own serialization bug
                    self._generation_failed(searches[fn], generator.name, ERROR,
                                            f"to_dict failed: {type(exc).__name__}: {exc}")
                    continue
                works.append(self._work("generate", searches[fn], generator.name, spec, generator=True))
                logger.info("submitted %s for %s to the actors", generator.name, fn)
        return works

    def _collect_generated(self, searches: dict[str, FunctionSearch], tasks: list[Work]) -> None:
        for work in self._scheduler.wait(tasks):
            search = searches[work.function]
            if work.status != OK:
                self._generation_failed(search, work.label, work.status, work.error, work.seconds)
                continue
            outcome = GenerationOutcome.from_dict(work.out)
            self.outcomes.append(outcome)
            if outcome.status != OK:
                search.records.append(ProviderBenchmark(work.function, outcome.description or work.label,
                                                        outcome.status, source=f"generator:{work.label}",
                                                        error=outcome.error, seconds=outcome.seconds,
                                                        gpu=work.where.get("gpu", ""),
                                                        node=work.where.get("node", "")))
                logger.warning("%s produced no candidate for %s: %s", work.label, work.function, outcome.error)
                continue
            job = BenchmarkJob(work.function, outcome.provider, f"generator:{work.label}")
            self._take({search.function: search}, self.run_benchmarks([job], {search.function: search}))

    # ----- the decision --------------------------------------------------------------------------------
    def _choose(self, search: FunctionSearch) -> KernelProvider | None:
        valid = [r for r in search.records if r.ok and r.median_ms is not None]
        if not valid:
            return None
        originals = self._originals(search, {(r.node, r.gpu) for r in valid})
        if not originals:
            logger.warning("the original %s could not be timed on any actor", search.function)
            return None
        unmatched = set()
        for record in valid:
            base = originals.get((record.node, record.gpu))
            if base is None:   # its actor was replaced by one on another GPU: compare after a re-measure
                base = next(iter(originals.values()))
                unmatched.add(id(record))
            record.speedup = base.median_ms / max(record.median_ms, 1e-9)
        finalists = finalists_to_remeasure(valid, self.remeasure_margin, unmatched) if self.final_rounds > 0 else []
        if finalists:   # the choice is then made among the finalists, on their re-measured numbers
            self._remeasure(search, finalists)
            valid = [r for r in finalists if r.remeasured is not None]
            if not valid:
                logger.warning("nothing is kept for %s: its finalists could not be re-measured on one GPU",
                               search.function)
                return None
        best = select_best(valid, search.function)
        return kernel_provider_from_dict(best.provider) if best is not None else None

    def _originals(self, search: FunctionSearch, where: set) -> dict[tuple, ProviderBenchmark]:
        """The original timed on each (node, gpu) in where (on another actor where that one is gone)."""
        works = [self._work("original", search, f"original F.{search.function}", self.measure.to_dict(),
                            prefer=identity) for identity in sorted(where)]
        found: dict[tuple, ProviderBenchmark] = {}
        for work in self._scheduler.wait(works):
            if work.status != OK:
                logger.warning("timing the original %s on %s failed: %s", search.function,
                               work.where.get("gpu", "?"), work.error)
                continue
            record = ProviderBenchmark.from_dict(work.out)
            search.records.append(record)
            if record.ok:
                found.setdefault((record.node, record.gpu), record)
        return found

    def _remeasure(self, search: FunctionSearch, finalists: list[ProviderBenchmark]) -> None:
        """The original and finalists timed interleaved on one actor (the best's GPU where it lives)."""
        best = finalists[0]
        work = self._work("interleaved", search, f"re-measure of {search.function}",
                          [r.provider for r in finalists], self.final_rounds, prefer=(best.node, best.gpu))
        next(self._scheduler.wait([work]))
        if work.status != OK:
            logger.warning("the interleaved re-measure of %s failed: %s", search.function, work.error)
            return
        out = work.out
        base = out["original"]["median_ms"]
        for index, record in enumerate(finalists):
            timing = out["candidates"].get(str(index))
            if timing is None:
                logger.warning("%s was not re-measured: %s", record.description, out["errors"].get(str(index)))
                continue
            speedup = base / max(timing["median_ms"], 1e-9)
            record.remeasured = {"gpu": out["gpu"], "node": out["node"], "rounds": out["rounds"],
                                 "median_ms": timing["median_ms"], "cv": timing["cv"], "original_ms": base,
                                 "speedup": speedup, "raw_speedup": record.speedup}
            record.speedup = speedup
        logger.info("re-measured the original %s and %d finalist(s) interleaved on %s", search.function,
                    len(finalists), out["gpu"])


# ----- KernelSelectorBackend jobs in a RayExecutor batch -----------------------------------------------------

class PlanRun:
    """Makes the kernel plan of KernelSelectorBackend jobs that share one plan key on a driver thread (see
    the module docstring); the first job's config makes it.

    ready: set once the driver's profiling is over (the forge has queued its first tasks) or the run ended.
    done: set when it ended; then outcome() gives each job carrying the plan, or each job's failed result.
    """

    def __init__(self, executor, context, jobs: list[CandidateJob]):
        self.executor, self.context, self.jobs = executor, context, list(jobs)
        self.job = self.jobs[0]
        self.ready, self.done = threading.Event(), threading.Event()
        self.plan: KernelOptimizationPlan | None = None
        self.error: Exception | None = None
        self.started = self.seconds = 0.0
        self._optimizer: RayKernelOptimizer | None = None

    def start(self) -> None:
        """Profile here, on the calling thread; then search on a thread of its own."""
        self.started = time.monotonic()
        ctx = self.context
        try:
            backend = Backend.from_spec(self.job.spec)
            self._optimizer = backend.config.optimizer(
                RayKernelOptimizer, executor=self.executor, on_queue=self.ready.set, context=ctx,
                intent="cuda" if torch.device(ctx.device).type == "cuda" else "cpu")
            if len(ctx.samples):
                profiled = self._optimizer.profile_functions(ctx.module, ctx.samples, module=ctx.module)
            else:
                logger.warning("[%s] no recorded samples to profile, so no kernel is replaced", ctx.name)
                profiled = ProfiledFunctions({}, [], [])
        except Exception as exc:  # noqa: BLE001 - the plan's failure is this candidate's result
            self._failed(exc)
            return
        threading.Thread(target=self._run, args=(profiled,), name=f"kernel-plan-{self.job.key}", daemon=True).start()

    def cancel(self) -> None:
        if self._optimizer is not None:
            self._optimizer.cancel()

    def _failed(self, exc: Exception) -> None:
        logger.error("[%s] kernel plan of %s failed: %s: %s", self.context.name, self.job.key, type(exc).__name__, exc)
        self.error = exc
        self.seconds = time.monotonic() - self.started
        self.ready.set()
        self.done.set()

    def _run(self, profiled: ProfiledFunctions) -> None:
        ctx = self.context
        try:
            self.plan = self._optimizer.search(profiled)
            logger.info("[%s] kernel plan of %s: %s", ctx.name, ", ".join(j.key for j in self.jobs),
                        self.plan.describe())
        except Cancelled:
            logger.info("[%s] kernel plan of %s cancelled", ctx.name, self.job.key)
        except Exception as exc:  # noqa: BLE001 - the plan's failure is this candidate's result
            logger.debug("kernel plan of %s", self.job.key, exc_info=True)
            self._failed(exc)
        finally:
            self.ready.set()
            self.done.set()

    def outcome(self) -> list[CandidateJob | BuildResult]:
        """After done: each job carrying the plan, to build; or each job's failed result; nothing when the
        run was cancelled."""
        if self.plan is not None:
            return [dataclasses.replace(j, spec=KernelSelectorBackend.spec_with_plan(j.spec, self.plan))
                    for j in self.jobs]
        if self.error is None:
            return []
        exc = self.error
        return [BuildResult(key=j.key, backend=j.backend_name, spec=j.spec, status=ERROR,
                            error_type=type(exc).__name__, error=f"kernel plan failed: {type(exc).__name__}: {exc}",
                            build_s=self.seconds, device=str(self.context.device)) for j in self.jobs]
