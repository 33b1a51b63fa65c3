"""InlineExecutor: every candidate one after another in this process. No Ray; for debugging and CPUs."""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterator

from aitune_ray.backend.backend import Backend
from aitune_ray.backend.kernel_selector_backend import KernelSelectorBackend
from aitune_ray.candidate import run_candidate
from aitune_ray.cluster import artifacts
from aitune_ray.cluster.executor import Executor, RunHandle, TuneContext
from aitune_ray.errors import BuildError, ConfigError
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan
from aitune_ray.measure.timing import Timing, profile_samples, profile_side_by_side
from aitune_ray.results import BuildResult, CandidateJob

logger = logging.getLogger(__name__)


class _InlineHandle(RunHandle):
    def __init__(self, executor: "InlineExecutor", context: TuneContext, jobs: list[CandidateJob]):
        self._executor, self._context, self._jobs = executor, context, list(jobs)
        self._cancelled = False

    def __iter__(self) -> Iterator[BuildResult]:
        ctx = self._context
        for index, job in enumerate(self._jobs):
            if self._cancelled:
                return
            logger.info("[%s] candidate %d/%d: %s", ctx.name, index + 1, len(self._jobs), job.key)
            plan_key = KernelSelectorBackend.plan_key(job.spec)
            plan_key = None if plan_key is None else (ctx.name, plan_key)
            if plan_key in self._executor._plans:   # another KernelSelector candidate planned it already
                logger.info("[%s] %s reuses the kernel plan made for a candidate before it", ctx.name, job.key)
                job = dataclasses.replace(job, spec=KernelSelectorBackend.spec_with_plan(
                    job.spec, self._executor._plans[plan_key]))
            result, backend = run_candidate(job, ctx.module, ctx.samples, ctx.device, ctx.workdir)
            if plan_key is not None and isinstance(backend, KernelSelectorBackend):
                self._executor._plans.setdefault(plan_key, backend.plan)
            if backend is not None:
                backend.deactivate()
                self._executor._built[(ctx.name, job.key)] = backend
            yield result

    def cancel(self) -> None:
        self._cancelled = True


class InlineExecutor(Executor):
    """Runs builds sequentially in the calling process, keeping the built backends alive.

    remeasure_rounds: before MaxThroughput decides, eager and the finalists are timed again in turn
    (A B A B ..., this many rounds per batch size): each candidate was first timed at its own moment, after
    the builds before it, and a slow drift (clocks, heat, whatever a build left running) would otherwise
    decide between close candidates. 0 keeps the first numbers.

    KernelSelector candidates of one module with the same kernel-selection config (they differ in their
    delegate) share one plan: the first profiles and plans, the others build on its plan (on Ray the
    driver makes one plan for them all)."""

    def __init__(self, remeasure_rounds: int = 30):
        if remeasure_rounds < 0:
            raise ConfigError(f"remeasure_rounds must not be negative, got {remeasure_rounds}")
        self.remeasure_rounds = remeasure_rounds
        self._built: dict[tuple[str, str], Backend] = {}
        self._plans: dict[tuple[str, str], KernelOptimizationPlan] = {}   # (module, plan key) -> plan

    def baseline(self, context: TuneContext) -> dict[int, Timing]:
        return profile_samples(context.module, context.samples, context.device, context.measure)

    def submit(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        return _InlineHandle(self, context, jobs)

    def remeasure(self, context: TuneContext, results: list[BuildResult],
                  baseline: dict[int, Timing]) -> dict[int, Timing] | None:
        if not self.remeasure_rounds:
            return None
        backends = {r.key: self._backend(context, r) for r in results}
        backends = {key: b for key, b in backends.items() if b is not None}
        if not backends:
            return None
        calls = {"eager": context.module}
        for key, backend in backends.items():
            backend.activate()
            calls[key] = backend.infer
        try:
            timed = profile_side_by_side(calls, context.samples, context.device, self.remeasure_rounds)
        finally:
            for backend in backends.values():
                backend.deactivate()
        for r in results:
            r.remeasured = {bs: t.to_dict() for bs, t in timed.get(r.key, {}).items()}
        logger.info("[%s] re-measured eager and %d finalist(s) side by side", context.name, len(backends))
        return timed["eager"]

    def _backend(self, context: TuneContext, result: BuildResult) -> Backend | None:
        """The backend built here for result, else one restored from its spec, state and artifacts (a result
        replayed from a run folder). None for a result that has neither."""
        backend = self._built.get((context.name, result.key))
        if backend is not None or not result.ok:
            return backend
        where = context.workdir / "restored" / result.key
        try:
            backend = Backend.from_spec(result.spec)
            backend.restore(context.module, result.state, artifacts.fetch(result.artifacts, where),
                            context.device, where)
        except Exception as exc:  # noqa: BLE001 - a backend's restore may raise anything
            logger.warning("[%s] %s could not be restored: %s: %s", context.name, result.key, type(exc).__name__, exc)
            return None
        self._built[(context.name, result.key)] = backend
        return backend

    def materialize(self, context: TuneContext, result: BuildResult) -> Backend:
        backend = self._backend(context, result)
        if backend is None:
            raise BuildError(f"{result.key} was not built here for {context.name}")
        backend.activate()
        return backend

    def discard(self, context: TuneContext) -> None:
        for key in [k for k in self._built if k[0] == context.name]:
            del self._built[key]
        for key in [k for k in self._plans if k[0] == context.name]:
            del self._plans[key]
