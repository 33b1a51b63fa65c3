"""InlineExecutor: every candidate one after another in this process. No Ray; for debugging and CPUs."""

from __future__ import annotations

import logging
from typing import Iterator

from aitune_ray.backend.backend import Backend
from aitune_ray.candidate import run_candidate
from aitune_ray.cluster.executor import Executor, RunHandle, TuneContext
from aitune_ray.errors import BuildError
from aitune_ray.measure.timing import Timing, profile_samples
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
            result, backend = run_candidate(job, ctx.module, ctx.samples, ctx.device, ctx.workdir)
            if backend is not None:
                backend.deactivate()
                self._executor._built[(ctx.name, job.key)] = backend
            yield result

    def cancel(self) -> None:
        self._cancelled = True


class InlineExecutor(Executor):
    """Runs builds sequentially in the calling process, keeping the built backends alive."""

    def __init__(self):
        self._built: dict[tuple[str, str], Backend] = {}

    def baseline(self, context: TuneContext) -> dict[int, Timing]:
        return profile_samples(context.module, context.samples, context.device, context.measure)

    def submit(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        return _InlineHandle(self, context, jobs)

    def materialize(self, context: TuneContext, result: BuildResult) -> Backend:
        backend = self._built.get((context.name, result.key))
        if backend is None:
            raise BuildError(f"{result.key} was not built here for {context.name}")
        backend.activate()
        return backend

    def discard(self, context: TuneContext) -> None:
        for key in [k for k in self._built if k[0] == context.name]:
            del self._built[key]
