"""RayRunHandle: one batch of candidate jobs on a RayExecutor's actors, handed on as they end.

Jobs whose backend needs a plan first (Backend.plan_key) wait for it: the driver profiles, then searches, on
a thread of its own (aitune_ray.cluster.forge.PlanRun); the other jobs build while the search runs. On actors
with a GPU each they also wait for the profile; actors that share their GPU, with each other or with the
driver, build during it (the profile holds a build's turn there, see aitune_ray.measure.turns). Meanwhile
this loop keeps polling the pool, which starts its later actors on time. A task that times out, loses its
worker or raises becomes that job's result.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Iterator

import ray

import aitune_ray.artifacts as artifacts
from aitune_ray.backend.backend import plan_key_of
from aitune_ray.cluster.tasks import Task, TaskRunner
from aitune_ray.executor import RunHandle, TuneContext
from aitune_ray.failures import log_hint, revive_exception, short
from aitune_ray.results import CANCELLED, ERROR, OOM, TIMED_OUT, BuildResult, CandidateJob

logger = logging.getLogger(__name__)


class RayRunHandle(RunHandle):
    def __init__(self, executor, context: TuneContext, jobs: list[CandidateJob]):   # executor: a RayExecutor
        from aitune_ray.cluster.forge import PlanRun

        self._ex, self._ctx = executor, context
        groups: dict[str, list[CandidateJob]] = {}   # plan key -> the jobs that share that plan
        for job in jobs:
            key = plan_key_of(job.spec)
            if key is not None:
                groups.setdefault(key, []).append(job)
        self._queue = collections.deque(job for job in jobs if plan_key_of(job.spec) is None)
        self._plans = [PlanRun(executor, context, group) for group in groups.values()]
        self._runner: TaskRunner | None = None   # bound to the pool at first use (Ray may still be starting)
        self._cancelled = False
        for job in jobs:
            executor._emit(context, job, "queued", "running", {}, 0.0)

    def start(self) -> bool:
        """Keep one actor for the eager baseline and start the first builds on the others now, so that
        they overlap the baseline (when kernel plans are pending and the actors have a GPU each, the builds
        wait for the driver's profile, after the baseline; on one local GPU the driver then times eager and
        profiles while that actor is still starting). Returns whether an actor was kept."""
        if not self._queue and not self._plans:
            return False
        slot = self._ex.pool.acquire()
        if slot is None:
            return False
        self._ex._baseline_slots[self._ctx.name] = slot
        self._dispatch()
        return True

    def __iter__(self) -> Iterator[BuildResult]:
        finished = False
        waiting_since = None   # since when jobs wait with nothing in flight
        try:
            # Plain builds first where they need not wait for a plan (actors that share their GPU): the
            # module's put and their dispatch then run before the profile's thread competes for this process.
            self._dispatch()
            for plan in self._plans:   # each profiles, then searches, on a thread of its own
                for job in plan.jobs:
                    self._ex._emit(self._ctx, job, "planning", "running", self._ex.driver(), 0.0, task="profile")
                plan.start()
            while not self._cancelled and (self._queue or self._tasks.inflight or self._plans):
                # Jobs already queued go before those whose plan has just finished: the plain builds wait
                # only for the driver's profiling, never for the search.
                self._dispatch()
                for result in self._planned():
                    yield result
                    if self._cancelled:
                        return
                self._dispatch()
                if not self._tasks.inflight:
                    waited = time.monotonic() - (waiting_since := waiting_since or time.monotonic())
                    stalled = bool(self._queue) and not self._plans and waited > self._ex.task_timeout_s
                    if not self._ex.pool.alive() or stalled:   # every slot retired, or none starts again
                        reason = "" if not stalled else (f"not run: no actor could start within "
                                                         f"task_timeout_s={self._ex.task_timeout_s:g}s")
                        while self._queue and not self._cancelled:
                            yield self._unrun(self._queue.popleft(), reason)
                        if not self._plans:
                            break
                    time.sleep(0.05)   # kernel plans still running, or the forge holds every actor
                    continue
                waiting_since = None
                # Each ended build is handed on before its actor gets the next one: what the consumer releases
                # on seeing it (MaxThroughput drops builds out of reach) then reaches that actor ahead of its
                # next build, instead of behind it, where the released build would still hold its memory while
                # the next one builds (the loop's top dispatches).
                ended = self._tasks.wait(self._tasks.poll_s(0.2 if self._plans else 1.0))
                for task in ended:
                    result = self._result(task)
                    self._ex._done(self._ctx, task, result)
                    yield result
                    if self._cancelled:
                        return
            finished = True
        finally:
            if not finished:   # Ctrl-C, an error in the consumer, or the consumer stopped early
                self.cancel()

    @property
    def _tasks(self) -> TaskRunner:
        if self._runner is None:
            self._runner = TaskRunner(self._ex.pool)
        return self._runner

    def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        never = list(self._queue)
        self._queue.clear()
        for job in never:
            self._ex._emit(self._ctx, job, "done", CANCELLED, {}, 0.0)
        kept = self._ex._baseline_slots.pop(self._ctx.name, None)
        if kept is not None:   # the baseline never ran (an error before it)
            kept.busy = False
        for plan in self._plans:
            plan.cancel()
            for job in plan.jobs:
                self._ex._emit(self._ctx, job, "done", CANCELLED, self._ex.driver(), time.monotonic() - plan.started,
                               task="profile")
        self._plans.clear()
        running = self._runner.cancel("its work was cancelled") if self._runner is not None else []
        for task in running:   # killed first: a progress callback may raise
            self._ex._emit(self._ctx, task.payload, "done", CANCELLED, task.where, time.monotonic() - task.dispatched)

    # ----- internals ------------------------------------------------------------------------------
    def _planned(self) -> Iterator[BuildResult]:
        """Jobs whose kernel plan is finished go to the front of the queue; a failed plan is a result."""
        for plan in [p for p in self._plans if p.done.is_set()]:
            self._plans.remove(plan)
            outcomes = list(zip(plan.jobs, plan.outcome()))   # empty when the plan was cancelled
            self._queue.extendleft(reversed([o for _, o in outcomes if isinstance(o, CandidateJob)]))
            for job, outcome in outcomes:
                if isinstance(outcome, CandidateJob):
                    self._ex._emit(self._ctx, job, "done", "ok", self._ex.driver(), time.monotonic() - plan.started,
                                   task="profile")
                if isinstance(outcome, BuildResult):
                    self._ex._emit(self._ctx, job, "done", outcome.status, self._ex.driver(),
                                   time.monotonic() - plan.started, task="profile")
                    yield outcome

    def _dispatch(self) -> None:
        if not self._queue or (not self._ex.actors_share_gpus() and any(not p.ready.is_set() for p in self._plans)):
            # The driver is still profiling for a kernel plan, whose tasks go first. Actors that share their
            # GPU (with each other or the driver) build meanwhile: the profile holds a build's turn there,
            # which their timings wait for.
            return
        box, intent = self._ex._box(self._ctx), self._ex._intent(self._ctx)
        while self._queue:
            slot = self._ex.pool.acquire()
            if slot is None:
                return
            job = self._queue.popleft()
            task = self._tasks.start(slot, "run", (self._ctx.name, box, intent, job.to_dict()), self._ex.task_timeout_s,
                                     payload=job, name=f"build {job.backend_name}:{self._ctx.name}")
            self._ex._emit(self._ctx, job, "building", "running", task.where, 0.0)

    def _result(self, task: Task) -> BuildResult:
        """What an ended build task gives: the worker's result, or a result saying how the task failed."""
        job, failure = task.payload, task.failure
        if task.timed_out:
            return self._failed(task, TIMED_OUT, f"{job.backend_name} ran past task_timeout_s="
                                f"{self._ex.task_timeout_s:g}s; its actor was killed and replaced", "TimeoutError")
        if failure is not None and failure.worker_lost:
            hint = log_hint(task.log_path)
            what = "ran out of memory" if failure.status == OOM else "died"
            return self._failed(task, failure.status, f"the worker process {what} while building {job.backend_name}"
                                f"{': ' + hint if hint else ''} ({short(failure.cause)})", failure.error_type)
        if failure is not None:   # the actor method itself raised (e.g. the module did not load)
            result = self._failed(task, failure.status, failure.error, failure.error_type)
            result.exception = failure.cause
            return result
        out = task.out
        result = BuildResult.from_dict(out["result"])
        result.exception = revive_exception(out.get("exception"))
        try:
            for name, blob in (out.get("refs") or {}).items():
                result.artifacts[name] = ray.get(blob)
            result.artifacts = artifacts.store(result.artifacts, self._ctx.workdir / "artifacts" / job.key)
        except Exception as exc:
            logger.exception("artifacts of %s did not reach the driver", job.key)
            result.status, result.error_type = ERROR, type(exc).__name__
            result.error = f"artifact transfer failed: {type(exc).__name__}: {exc}"
            result.artifacts = {}
        return result

    def _unrun(self, job: CandidateJob, reason: str = "") -> BuildResult:
        result = BuildResult(key=job.key, backend=job.backend_name, spec=job.spec, status=ERROR,
                             error_type="NoActorsLeft",
                             error=reason or f"not run: every actor slot used up its max_actor_restarts="
                                             f"{self._ex.max_actor_restarts} replacements")
        self._ex._emit(self._ctx, job, "done", ERROR, {}, 0.0)
        return result

    def _failed(self, task: Task, status: str, error: str, error_type: str) -> BuildResult:
        info, job = task.where, task.payload
        device = "cuda" if self._ex._intent(self._ctx) == "cuda" and info.get("cuda", True) else "cpu"
        return BuildResult(key=job.key, backend=job.backend_name, spec=job.spec, status=status,
                           error=error, error_type=error_type, build_s=task.seconds or time.monotonic() - task.dispatched,
                           device=device, node=info.get("node", ""), gpu=info.get("gpu", ""),
                           log_path=info.get("log_path") or task.log_path)
