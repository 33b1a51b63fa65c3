"""RayRunHandle: one module's batch of candidate jobs in the job's schedule, handed on as they end.

start() queues the batch's builds in the executor's one schedule (aitune_ray.cluster.schedule), beside every
other module's; iterating waits for this batch's own events only (a build started, ended, or was queued again
after its node left), so a module's decision never waits for another module's work.

Jobs whose backend needs a plan first (Backend.plan_key) wait for it: the driver profiles, then searches, on
a thread of its own (aitune_ray.cluster.forge.PlanRun); the other jobs build while the search runs. On actors
with a GPU each they also wait for the profile; actors that share their GPU, with each other or with the
driver, build during it (the profile holds a build's turn there, see aitune_ray.measure.turns). A task that
times out, loses its worker or raises becomes that job's result. Talks to the executor through what Host
names only.
"""

from __future__ import annotations

import logging
import queue
import time
from typing import Any, Iterator, Protocol

import ray

import aitune_ray.records.artifacts as artifacts
from aitune_ray.backend.backend import plan_key_of
from aitune_ray.cluster.pool import ActorPool
from aitune_ray.cluster.schedule import Request, Schedule
from aitune_ray.cluster.tasks import Task
from aitune_ray.errors import BuildError
from aitune_ray.worker.seam import RunHandle, TuneContext
from aitune_ray.records.failures import outcome, revive_exception
from aitune_ray.records.results import CANCELLED, ERROR, BuildResult, CandidateJob

logger = logging.getLogger(__name__)


class Host(Protocol):
    """What a run handle uses of its executor (a RayExecutor), and what the handle's plans
    (aitune_ray.cluster.forge.PlanRun, given the same executor) use of it."""

    task_timeout_s: float   # a task running longer is timed out
    schedule: Schedule      # the job's one schedule over the pool
    pool: ActorPool | None  # the actor pool (None before it is made)

    def open(self) -> None: ...

    def put(self, value) -> Any: ...   # value in Ray's object store

    def box(self, context: TuneContext) -> list: ...   # [module ref, samples ref]

    def intent(self, context: TuneContext) -> str: ...   # cuda or cpu

    def emit(self, context: TuneContext, event: str, **fields) -> dict: ...   # a progress event

    def emit_job(self, context: TuneContext, job: CandidateJob, event: str, status: str = "running",
                 where: dict | None = None, elapsed_s: float = 0.0, task: str = "build", **extra) -> None: ...

    def driver(self) -> dict: ...   # where the driver's own work runs, for progress events

    def task_done(self, context: TuneContext, task: Task, result: BuildResult) -> None: ...

    def actors_share_gpus(self) -> bool: ...


class RayRunHandle(RunHandle):
    def __init__(self, executor: Host, context: TuneContext, jobs: list[CandidateJob]):
        from aitune_ray.cluster.forge import PlanRun

        self._ex, self._ctx = executor, context
        groups: dict[str, list[CandidateJob]] = {}   # plan key -> the jobs that share that plan
        for job in jobs:
            key = plan_key_of(job.spec)
            if key is not None:
                groups.setdefault(key, []).append(job)
        self._plain = [job for job in jobs if plan_key_of(job.spec) is None]
        self._inbox: queue.Queue = queue.Queue()
        self._plans = [PlanRun(executor, context, group, notify=self._plan_event) for group in groups.values()]
        self._requests: list[Request] = []
        self._outstanding = len(jobs)
        self._started = self._cancelled = False
        for job in jobs:
            executor.emit_job(context, job, "queued")

    def start(self) -> None:
        """Queue this batch's builds in the job's schedule and start its plans (once)."""
        if self._started:
            return
        self._started = True
        self._queue(self._plain)
        for plan in self._plans:   # each profiles, then searches, on a thread of its own
            for job in plan.jobs:
                self._ex.emit_job(self._ctx, job, "planning", where=self._ex.driver(), task="profile")
            plan.start()

    def __iter__(self) -> Iterator[BuildResult]:
        finished = False
        try:
            self.start()
            while self._outstanding and not self._cancelled:
                what, item = self._inbox.get()
                if what == "plan":
                    for result in self._planned():
                        self._outstanding -= 1
                        yield result
                        if self._cancelled:
                            return
                elif what == "error":   # the progress callback raised as the build started
                    raise item.error
                elif what == "requeued":
                    self._ex.emit_job(self._ctx, item.payload, "queued", reason="its node left the cluster",
                                      lost_log=item.lost_logs[-1])
                elif what in ("cancelled", "stopped"):   # not by this handle: the whole job was stopped
                    raise BuildError(f"{self._ctx.name}: its work was cancelled")
                elif what == "end":
                    # Each ended build is handed on before its actor gets the next one: what the consumer releases
                    # on seeing it (MaxThroughput drops builds out of reach) then reaches that actor ahead of its
                    # next build, where the released build would otherwise still hold its memory.
                    self._outstanding -= 1
                    result = self._result(item)
                    try:
                        yield result
                    finally:
                        self._ex.schedule.handed_on(item)
                    if self._cancelled:
                        return
            finished = True
        finally:
            if not finished:   # Ctrl-C, an error in the consumer, or the consumer stopped early
                self.cancel()

    def stop(self) -> None:
        """The whole job is stopped (Executor.stop_all): the consumer's wait ends with an error (its plans too)."""
        self._inbox.put(("stopped", None))

    def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        running = set(self._ex.schedule.cancel(self._requests, "its work was cancelled")) if self._requests else set()
        for request in self._requests:
            if request.state == "ended":   # a result no one took: its actor is free again
                self._ex.schedule.handed_on(request)
        for request in self._requests:
            if request.state == "cancelled" and request not in running:
                self._ex.emit_job(self._ctx, request.payload, "done", CANCELLED)
        for plan in self._plans:
            plan.cancel()
            for job in plan.jobs:
                self._ex.emit_job(self._ctx, job, "done", CANCELLED, where=self._ex.driver(),
                                  elapsed_s=time.monotonic() - plan.started, task="profile")
        self._plans.clear()
        for request in running:   # killed first: a progress callback may raise
            task = request.task
            self._ex.emit_job(self._ctx, request.payload, "done", CANCELLED, where=task.where if task else {},
                              elapsed_s=time.monotonic() - task.dispatched if task else 0.0)

    # ----- internals ------------------------------------------------------------------------------
    def _plan_event(self) -> None:
        """A plan's profile is over, or the plan ended (PlanRun's thread): look, and let held builds go."""
        self._inbox.put(("plan", None))
        self._ex.schedule.ring()

    def _building(self, request: Request) -> None:
        self._ex.emit_job(self._ctx, request.payload, "building", where=request.task.where)

    def _profiles_over(self) -> bool:
        """Whether plain builds may go: the driver's profiles for kernel plans are over (their tasks go first),
        or the actors share their GPU and build meanwhile (the profile holds a build's turn there)."""
        return self._ex.actors_share_gpus() or all(p.ready.is_set() for p in self._plans)

    def _queue(self, jobs: list[CandidateJob], front: bool = False) -> None:
        box, intent = self._ex.box(self._ctx), self._ex.intent(self._ctx)
        hold = self._profiles_over if self._plans and not front else None
        requests = [Request("run", (self._ctx.name, box, intent, job.to_dict()), self._ctx.name,
                            self._ex.task_timeout_s, name=f"build {job.backend_name}:{self._ctx.name}", payload=job,
                            cost=self._ex.schedule.costs.estimate(self._ctx.name, job.spec), group=id(self),
                            hold=hold, keep_slot=True, sink=self._inbox, on_start=self._building) for job in jobs]
        self._requests.extend(requests)
        self._ex.schedule.submit(*requests, front=front)

    def _planned(self) -> Iterator[BuildResult]:
        """Jobs whose kernel plan is finished go before the batch's other queued builds; a failed plan is a
        result."""
        for plan in [p for p in self._plans if p.done.is_set()]:
            self._plans.remove(plan)
            outcomes = list(zip(plan.jobs, plan.outcome()))   # empty when the plan was cancelled
            self._queue([o for _, o in outcomes if isinstance(o, CandidateJob)], front=True)
            for job, outcome in outcomes:
                status = "ok" if isinstance(outcome, CandidateJob) else outcome.status
                self._ex.emit_job(self._ctx, job, "done", status, where=self._ex.driver(),
                                  elapsed_s=time.monotonic() - plan.started, task="profile")
                if isinstance(outcome, BuildResult):
                    yield outcome

    def _result(self, request: Request) -> BuildResult:
        """What an ended build request gives: the worker's result, or a result saying how its task failed."""
        job, task = request.payload, request.task
        if task is None:
            self._ex.emit_job(self._ctx, job, "done", ERROR)
            failure = outcome(f"the build of {job.backend_name}", unrun=request.unrun or "it was cancelled")
            return BuildResult(key=job.key, backend=job.backend_name, spec=job.spec, status=failure.status,
                               error_type=failure.error_type, error=failure.error)
        result = self._outcome(job, task)
        self._ex.schedule.costs.measured(self._ctx.name, job.spec, task.seconds)
        self._ex.task_done(self._ctx, task, result)
        return result

    def _outcome(self, job: CandidateJob, task) -> BuildResult:
        """The worker's result; or, when its task timed out, lost its worker or the actor method itself
        raised (e.g. the module did not load), the result failures.outcome words for that."""
        failure = outcome(f"the build of {job.backend_name}", failure=task.failure, timed_out=task.timed_out,
                          limit_s=self._ex.task_timeout_s, limit_name="task_timeout_s", replaced=True,
                          log_path=task.log_path)
        if failure is not None:
            result = self._failed(task, failure.status, failure.error, failure.error_type)
            if not task.timed_out and not failure.worker_lost:
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
            failure = outcome("artifact transfer", exc=exc)
            result.status, result.error_type, result.error = failure.status, failure.error_type, failure.error
            result.artifacts = {}
        return result

    def _failed(self, task, status: str, error: str, error_type: str) -> BuildResult:
        info, job = task.where, task.payload.payload
        device = "cuda" if self._ex.intent(self._ctx) == "cuda" and info.get("cuda", True) else "cpu"
        return BuildResult(key=job.key, backend=job.backend_name, spec=job.spec, status=status,
                           error=error, error_type=error_type,
                           build_s=task.seconds or time.monotonic() - task.dispatched,
                           device=device, node=info.get("node", ""), gpu=info.get("gpu", ""),
                           log_path=info.get("log_path") or task.log_path)
