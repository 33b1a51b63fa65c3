"""Forge tasks on a RayExecutor's actor pool: Work (one TunerActor.forge call) and the Scheduler that
runs it on idle actors in submission order, through the one task runner (cluster/tasks.py).

A generator's timeout (generation_timeout) counts from its task's submission, and a generator still running
then has its actor killed and replaced without counting as a failure; any other task has the executor's
task_timeout_s, counted from when its actor was up, and a task that runs past it, or whose worker dies,
gets its actor replaced like a failed build. Work that prefers a GPU ((node, gpu)) waits for that actor
while it lives. The scheduler registers its queued work as demand on the pool, so that the forge gets idle
actors before a batch's plain builds do.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Any, Iterator

from aitune_ray.cluster.tasks import TaskRunner
from aitune_ray.records.failures import outcome
from aitune_ray.kernel_forge.records import OK


class Cancelled(Exception):
    """The plan was no longer wanted (its batch was cancelled)."""


@dataclasses.dataclass(eq=False)
class Work:
    """One actor task of the forge."""

    method: str                      # a forge task: benchmark, generate, original, interleaved
    args: tuple
    function: str
    label: str                       # what it runs (a provider's or generator's name)
    generator: bool = False          # generation_timeout from submission, and a kill that is no failure
    prefer: tuple | None = None      # (node, gpu): run there while that actor lives
    task: Any = None                 # its tasks.Task once dispatched
    dispatched: float = 0.0
    status: str = ""                 # "" while pending, then OK or why not
    error: str = ""
    out: Any = None
    where: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0


#: Per forge task: its progress task name and the event that starts it.
EVENTS = {"benchmark": ("forge-benchmark", "benchmarking"), "generate": ("forge-generate", "generating"),
          "original": ("forge-benchmark", "measuring"), "interleaved": ("forge-remeasure", "remeasuring")}


class Scheduler:
    """Runs Work on the idle actors of executor's pool, in submission order, with timeouts.

    context: the module's TuneContext, when the work's progress events are wanted (executor.emit)."""

    def __init__(self, executor, generation_timeout: float, cancelled: threading.Event, context=None):
        self.executor = executor
        self.context = context
        self.pool = executor.pool
        self.generation_timeout = generation_timeout
        self.cancelled = cancelled
        self.queue: collections.deque[Work] = collections.deque()
        self.tasks = TaskRunner(self.pool)

    def submit(self, work: Work) -> Work:
        self.queue.append(work)
        self._demand()
        return work

    def wait(self, works: list[Work]) -> Iterator[Work]:
        """Yield each of works as it finishes (in completion order), running everything submitted."""
        pending = list(works)
        while pending:
            for work in [w for w in pending if w.status]:
                pending.remove(work)
                yield work
            if pending:
                self._step()

    def close(self) -> None:
        """Stop whatever is still queued or running (its actors are replaced, not counted as failures)."""
        self.queue.clear()
        self.tasks.cancel("forge work no longer wanted")
        with self.pool.lock:
            self.pool.demand.pop(id(self), None)
        self.pool.changed()

    # ----- internals ----------------------------------------------------------------------------
    def _emit(self, work: Work, event: str, status: str) -> None:
        if self.context is not None:
            task = EVENTS[work.method][0]
            self.executor.emit(self.context, event, task=task, status=status, where=work.where,
                               elapsed_s=time.monotonic() - work.dispatched if status != "running" else 0.0,
                               key=f"{task}:{work.function}:{work.label}", backend=work.label, function=work.function)

    def _demand(self) -> None:
        with self.pool.lock:
            before = self.pool.demand.get(id(self), 0)
            self.pool.demand[id(self)] = len(self.queue)
        if before and not self.queue:   # the job's schedule may use the idle actors again
            self.pool.changed()

    def _step(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled()
        self._dispatch()
        if not self.tasks.inflight:
            if not self.pool.alive():
                for work in list(self.queue):
                    failure = outcome(self._what(work), unrun="no tuner actor is left")
                    work.status, work.error = failure.status, failure.error
                self.queue.clear()
                self._demand()
            else:
                time.sleep(0.05)   # every actor is busy with other work
            return
        for task in self.tasks.wait():
            self._finish(task.payload, task)

    def _dispatch(self) -> None:
        alive = len(self.pool.alive())
        for work in list(self.queue):
            if work.generator:
                running = sum(1 for t in self.tasks.inflight.values() if t.payload.generator)
                if running >= max(1, alive - 1):
                    continue
            slot = self.pool.acquire(urgent=True, prefer=work.prefer, only=work.prefer is not None)
            if slot is None:
                continue
            self.queue.remove(work)
            limit = self.generation_timeout if work.generator else self.executor.task_timeout_s
            work.task = self.tasks.start(slot, "forge", (work.method, *work.args), limit, payload=work,
                                         from_dispatch=work.generator, failure_on_timeout=not work.generator,
                                         name=f"{work.method} {work.label}:{work.function}")
            work.dispatched, work.where = work.task.dispatched, work.task.where
            self._emit(work, EVENTS[work.method][1], "running")
        self._demand()

    def _finish(self, work: Work, task) -> None:
        work.seconds, work.where = task.seconds, task.where
        limit = ("generation_timeout", self.generation_timeout) if work.generator else \
            ("task_timeout_s", self.executor.task_timeout_s)
        failure = outcome(self._what(work), failure=task.failure, timed_out=task.timed_out, limit_s=limit[1],
                          limit_name=limit[0], replaced=True, log_path=task.log_path)
        if failure is None:
            work.out, work.status = task.out, OK
        else:
            work.status, work.error = failure.status, failure.error
        self._emit(work, "done", self._status(work))

    @staticmethod
    def _what(work: Work) -> str:
        return f"the forge {work.method} of {work.label}"

    @staticmethod
    def _status(work: Work) -> str:
        """A finished task's outcome: the record's own status where the task returned one."""
        if work.status == OK and isinstance(work.out, dict) and isinstance(work.out.get("status"), str):
            return work.out["status"]
        return work.status
