"""InlineExecutor: every candidate one after another on this machine, on the worker core. No Ray.

With contain=True each build runs in a child process of its own (aitune_ray.executors.build_process): a build that
crashes, hangs past task_timeout_s or runs out of memory is that candidate's result, as on Ray. With
contain=False (the default of the class, for debugging: breakpoints and in-process state work) builds run in
this very process and nothing is contained: a segfaulting build ends the process, a hanging one hangs it.
Either way a journal (aitune_ray.executors.run_dir) records each candidate as started before its build, so that a
resume after a build took the process down records that candidate as crashed instead of building it again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import platform
import time
from pathlib import Path
from typing import Callable, Iterator

from aitune_ray.runtime import tempdirs
from aitune_ray.backend.backend import Backend, backend_class_of, plan_key_of
from aitune_ray.runtime.device import gpu_identity
from aitune_ray.errors import ConfigError
from aitune_ray.decision.session import CONFIRM_ROUNDS, Session
from aitune_ray.worker.seam import Executor, RunHandle, TuneContext, failed_plan
from aitune_ray.kernel_forge.runner import LocalRunner
from aitune_ray.measure.timing import Timing
from aitune_ray.records.results import CANCELLED, ERROR, BuildResult, CandidateJob
from aitune_ray.worker.core import Worker, confirmed, finalist

logger = logging.getLogger(__name__)


class _InlineHandle(RunHandle):
    def __init__(self, executor: "InlineExecutor", context: TuneContext, jobs: list[CandidateJob]):
        self._ex, self._ctx, self._jobs = executor, context, list(jobs)
        self._next = 0
        self._cancelled = False
        for job in self._jobs:
            executor.emit(context, "queued", job=job)

    def __iter__(self) -> Iterator[BuildResult]:
        ex, ctx = self._ex, self._ctx
        where = ex.where(ctx)
        while self._next < len(self._jobs) and not self._cancelled:
            job = self._jobs[self._next]
            self._next += 1
            logger.info("[%s] candidate %d/%d: %s", ctx.name, self._next, len(self._jobs), job.key)
            job, failed = ex._planned(ctx, job)
            if failed is not None:
                yield failed
                continue
            started = time.monotonic()
            ex.emit(ctx, "building", job=job, where=where)
            watch = ex.watch_build(ctx, job, not ex.contain) if ex.watch_build else contextlib.nullcontext()
            with watch:
                if ex.contain:
                    from aitune_ray.executors.build_process import run_in_child

                    result = run_in_child(ctx.name, ctx.module, ctx.samples, ctx.device, job, ctx.workdir,
                                          ex.task_timeout_s, where)
                else:
                    result = ex.worker.run(ctx.name, job, stage=lambda event: ex.emit(
                        ctx, event, job=job, where=where, elapsed_s=time.monotonic() - started))
            ex.emit(ctx, "done", job=job, status=result.status, where=where, elapsed_s=time.monotonic() - started)
            yield result

    def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        for job in self._jobs[self._next:]:
            self._ex.emit(self._ctx, "done", job=job, status=CANCELLED)


class InlineExecutor(Executor):
    """Runs builds sequentially in the calling process, on one worker core (aitune_ray.worker.core).

    remeasure_rounds: paired shuffled rounds per recorded batch size of the confirm session
    (aitune_ray.decision; default CONFIRM_ROUNDS). 0 runs no session: then eager is kept unless performance
    validation is off.
    progress: called with each progress event (aitune_ray.worker.seam).
    contain: build each candidate in a child process of its own (see the module docstring); the chosen
    and the re-measured candidates are then restored here from their results, as a Ray driver does.
    task_timeout_s: with contain, a build running longer is killed and "timed out".

    A job whose backend needs a plan before its build (Backend.plan_key: KernelSelectorBackend's kernel plan)
    gets it here first, from the backend's planner on a LocalRunner, as on Ray from the driver; jobs with
    one plan key (KernelSelector candidates that differ only in their delegate) share one plan."""

    def __init__(self, remeasure_rounds: int = CONFIRM_ROUNDS, progress: Callable[[dict], None] | None = None,
                 contain: bool = False, task_timeout_s: float = 1800.0):
        if remeasure_rounds < 0:
            raise ConfigError(f"remeasure_rounds must not be negative, got {remeasure_rounds}")
        if task_timeout_s <= 0:
            raise ConfigError(f"task_timeout_s must be positive, got {task_timeout_s}")
        self.remeasure_rounds = remeasure_rounds
        self.progress = progress
        self.contain, self.task_timeout_s = contain, task_timeout_s
        self.worker = Worker(tempdirs.make("inline"))
        self._plans: dict[tuple[str, str], object] = {}   # (module, plan key) -> plan

    def _planned(self, context: TuneContext, job: CandidateJob) -> tuple[CandidateJob, BuildResult | None]:
        """job, carrying its plan when its backend needs one (made here the first time its key is seen);
        or its failed result when the plan could not be made."""
        key = plan_key_of(job.spec)
        if key is None:
            return job, None
        cls = backend_class_of(job.spec)
        plan = self._plans.get((context.name, key))
        if plan is None:
            where, started = {"node": platform.node(), "gpu": "driver"}, time.monotonic()
            self.emit(context, "planning", task="profile", job=job, where=where)
            try:
                planner = cls.planner(job.spec, LocalRunner())
                planner.profile(context.module, context.samples)
                plan = planner.search()
            except Exception as exc:  # noqa: BLE001 - the plan's failure is this candidate's result
                logger.error("[%s] the plan of %s failed: %s: %s", context.name, job.key, type(exc).__name__, exc)
                self.emit(context, "done", task="profile", job=job, status=ERROR, where=where,
                          elapsed_s=time.monotonic() - started)
                return job, failed_plan([job], exc, time.monotonic() - started, context.device)[0]
            self.emit(context, "done", task="profile", job=job, status="ok", where=where,
                      elapsed_s=time.monotonic() - started)
            logger.info("[%s] plan of %s: %s", context.name, job.key, plan.describe())
            self._plans[(context.name, key)] = plan
        else:
            logger.info("[%s] %s reuses the plan made for a candidate before it", context.name, job.key)
        return dataclasses.replace(job, spec=cls.spec_with_plan(job.spec, plan)), None

    @staticmethod
    def where(context: TuneContext) -> dict:
        return {"node": platform.node(), "gpu": gpu_identity(context.device)}

    def _load(self, context: TuneContext) -> None:
        """The module and samples, as they are (no copy): the worker core keys them by identity."""
        token = (id(context.module), id(context.samples), str(context.device))
        self.worker.workdir.mkdir(parents=True, exist_ok=True)
        self.worker.load(context.name, token, lambda: (context.module, context.samples), context.device,
                         workdir=context.workdir, as_is=True)

    def baseline(self, context: TuneContext) -> dict[int, Timing]:
        self._load(context)
        where, started = self.where(context), time.monotonic()
        self.emit(context, "measuring", task="baseline", where=where, samples=len(context.samples),
                  batch_sizes=context.samples.batch_sizes())
        timings = self.worker.baseline(context.name, context.timing("baseline").to_dict())
        self.emit(context, "done", task="baseline", status="ok", where=where, elapsed_s=time.monotonic() - started)
        return {int(bs): Timing.from_dict(t) for bs, t in timings.items()}

    def submit(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        self._load(context)
        return _InlineHandle(self, context, jobs)

    def confirm(self, context: TuneContext, results: list[BuildResult]) -> Session:
        """The confirm session here, on the builds the worker holds (the very objects deployed)."""
        self._load(context)
        where, started = self.where(context), time.monotonic()
        self.emit(context, "remeasuring", task="remeasure", where=where, finalists=[r.key for r in results])
        out = self.worker.confirm(context.name, [finalist(r) for r in results],
                                  context.timing("confirm", self.remeasure_rounds).to_dict())
        self.emit(context, "done", task="remeasure", status="error" if out.get("failed") else "ok", where=where,
                  elapsed_s=time.monotonic() - started)
        return confirmed(results, out)

    def release(self, context: TuneContext, result: BuildResult) -> None:
        self.worker.release(context.name, result.key)

    def materialize(self, context: TuneContext, result: BuildResult) -> Backend:
        self._load(context)
        return self.worker.take(context.name, finalist(result))

    def discard(self, context: TuneContext) -> None:
        self.worker.discard(context.name)
        try:   # the worker's own folder, empty once its modules are gone (made again by the next one)
            self.worker.workdir.rmdir()
        except OSError:
            pass
        for key in [k for k in self._plans if k[0] == context.name]:
            del self._plans[key]
