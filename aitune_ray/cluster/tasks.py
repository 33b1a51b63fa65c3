"""The one task runner: actor calls in flight, their timeouts, and what became of each.

Builds, the kernel forge's tasks and single calls (the eager baseline, the
re-measure) all run through a TaskRunner: the caller picks a slot and starts a call; wait() returns the
tasks that ended, each with its output, or its failure (failures.classify: the worker died, ran out of
memory, or the call raised), or marked timed out. A task whose worker is gone, or that ran past its
limit, has its actor replaced here (a timeout counts as a failure unless the task says otherwise). A task
whose node left the cluster says so (node_lost): the job's schedule runs it again elsewhere.

A task's limit counts from when its actor was up (a fresh actor's start-up is not the task's time; until
then it has one more limit of grace), or from its dispatch (from_dispatch: generators, whose
generation_timeout counts from their submission).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import ray

from aitune_ray.cluster.pool import ActorPool, Slot
from aitune_ray.records.failures import Failure, classify


@dataclasses.dataclass(eq=False)
class Task:
    slot: Slot
    ref: Any
    limit_s: float
    payload: Any = None                  # the caller's own (a job, a forge Work)
    from_dispatch: bool = False
    failure_on_timeout: bool = True
    keep_slot: bool = False              # the slot stays busy after the task until its owner frees it
    dispatched: float = dataclasses.field(default_factory=time.monotonic)
    started: float | None = None         # when the actor was up
    where: dict = dataclasses.field(default_factory=dict)   # the slot's identity (kept: a replaced slot forgets)
    log_path: str = ""
    out: Any = None
    failure: Failure | None = None
    timed_out: bool = False
    node_lost: bool = False              # its worker was lost with its node (not the task's own fault)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None and not self.timed_out

    def deadline(self, now: float) -> float:
        if self.from_dispatch:
            return self.dispatched + self.limit_s
        if self.started is None and self.slot.ready():
            self.started = now
        return (self.started if self.started is not None else self.dispatched + self.limit_s) + self.limit_s


class TaskRunner:
    def __init__(self, pool: ActorPool):
        self.pool = pool
        self.inflight: dict[Any, Task] = {}

    def start(self, slot: Slot, method: str, args: tuple, limit_s: float, *, payload: Any = None,
              from_dispatch: bool = False, failure_on_timeout: bool = True, name: str = "",
              keep_slot: bool = False) -> Task:
        """Call slot's actor (slot is busy until the task ends). name: the task's name in Ray's dashboard
        and state API (for example "build TorchInductorJitBackend:encoder")."""
        call = getattr(slot.actor, method)
        ref = (call.options(name=name) if name else call).remote(*args)
        slot.busy = True
        task = slot.owner = Task(slot, ref, limit_s, payload, from_dispatch, failure_on_timeout, keep_slot, where=slot.identity(),
                    log_path=slot.log_path)
        self.inflight[ref] = task
        return task

    def poll_s(self, cap: float = 1.0) -> float:
        """How long wait() may block before a deadline passes (at most cap)."""
        now = time.monotonic()
        return max(0.01, min([cap] + [t.deadline(now) - now for t in self.inflight.values()]))

    def wait(self, timeout: float | None = None) -> list[Task]:
        """The tasks that ended within timeout (default: until the next deadline), in completion order, then
        those that ran past their limit."""
        if not self.inflight:
            return []
        refs = list(self.inflight)
        ready, _ = ray.wait(refs, num_returns=1, timeout=self.poll_s() if timeout is None else timeout)
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        return self.collect(ready)

    def call(self, slot: Slot, method: str, args: tuple, limit_s: float, name: str = "") -> Task:
        """One call, waited for (its actor is replaced when it dies or runs past limit_s)."""
        task = self.start(slot, method, args, limit_s, name=name)
        while True:
            for ended in self.wait():
                if ended is task:
                    return task

    def cancel(self, reason: str) -> list[Task]:
        """Stop every task in flight: their actors are killed and replaced (not counted as failures)."""
        stopped = list(self.inflight.values())
        self.inflight.clear()
        for task in stopped:
            self.pool.replace(task.slot, reason, failure=False)
        return stopped

    def collect(self, refs: list) -> list[Task]:
        """The tasks of refs (ready ones; others are ignored), then those that ran past their limit."""
        return [self._collect(ref) for ref in refs if ref in self.inflight] + self._expire()

    def _collect(self, ref) -> Task:
        task = self.inflight.pop(ref)
        task.seconds = time.monotonic() - task.dispatched
        task.where = task.slot.identity() or task.where
        try:
            task.out = ray.get(ref)
        except ray.exceptions.RayError as exc:   # the worker died, or the actor method itself raised
            task.failure = classify(exc)
        if task.failure is not None and task.failure.worker_lost:
            task.node_lost = node_gone(task.where.get("node_id", ""), task.failure.cause)
            self.pool.replace(task.slot, f"{describe(task)}: {task.failure.status}", failure=not task.node_lost)
        elif not task.keep_slot:
            self.pool.free(task.slot)
        return task

    def _expire(self) -> list[Task]:
        now = time.monotonic()
        expired = [(ref, t) for ref, t in self.inflight.items() if now >= t.deadline(now)]
        for ref, task in expired:
            del self.inflight[ref]
            task.timed_out, task.seconds = True, now - task.dispatched
            self.pool.replace(task.slot, f"{describe(task)}: timed out", failure=task.failure_on_timeout)
        return [t for _, t in expired]


# How Ray's actor-death messages say the actor went with its node (its GCS words, lower-cased), besides "its
# node" with died, dead or removed: a replacement actor that dies with a node before it reported where it
# runs is known lost only by these words.
RAY_NODE_DEATH = ("the actor's node was terminated", "the actor's node was preempted")


def node_gone(node_id: str, cause: BaseException) -> bool:
    """Whether the worker was lost with its node: Ray says so, or the node is no longer alive."""
    text = str(cause).lower()
    if ("its node" in text and any(word in text for word in ("died", "dead", "removed"))) or \
            any(phrase in text for phrase in RAY_NODE_DEATH):
        return True
    if not node_id:
        return False
    try:
        nodes = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
    except Exception:  # noqa: BLE001 - the cluster cannot be asked: treat it as the worker's own death
        return False
    return node_id in nodes and not nodes[node_id]


def describe(task: Task) -> str:
    payload = task.payload
    return str(getattr(payload, "key", None) or getattr(payload, "label", None) or getattr(payload, "name", None)
               or "a task")
