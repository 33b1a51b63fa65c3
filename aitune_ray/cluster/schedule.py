"""The job's one schedule: every module's actor work in one queue over the pool, run by one loop.

Run handles (builds), the executor (eager baselines, re-measures) and the kernel forge (provider benchmarks,
generators, the original's timings and the confirm of finalists; aitune_ray.cluster.forge) queue Requests
here, for every module of every model of a job at once. One thread dispatches them to idle actors and
collects what ended, waiting on Ray's futures only: the tasks in flight, the actors still starting, and a
Bell rung when work is queued or a slot is freed elsewhere.

Order: timing calls (a module's eager baseline, its re-measure) first, so that a module whose builds are
over is not held behind the others'; then urgent work (the kernel forge's tasks, whose plan a build waits
for), in the order queued; then builds by the expected cost of each module's next build, costliest first
(costs.Costs), each module's own builds in the order its strategy gave. A request held (hold() is False)
or with no slot it may run on (rank) lets the next one have the slot. A timing call runs alone on its
actor, and never beside another timing call on the same device: a GPU (actors sharing one also take turns
at it, aitune_ray.measure.turns), or a node's CPUs for a module tuned for the CPU. A task whose node left
the cluster is queued again, up to NODE_LOSS_RETRIES times; the actor log of the lost attempt stays where
it was written. Every GROW_EVERY_S the loop asks the pool to grow onto nodes that joined (of the job's GPU
kind): their actors take queued work once they are up.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue
import threading
import time
from typing import Any, Callable

import ray

from actors.bell import Bell
from aitune_ray.cluster.costs import Costs
from aitune_ray.cluster.pool import ActorPool, Slot
from aitune_ray.cluster.tasks import Task, TaskRunner

logger = logging.getLogger(__name__)

NODE_LOSS_RETRIES = 3   # a task is queued again at most this often after its node was lost
IDLE_WAKE_S = 5.0       # the loop also looks again this often (a second wave of actors, see ActorPool)
GROW_EVERY_S = 5.0      # and this often whether nodes joined that the pool can grow onto (ActorPool.grow)


@dataclasses.dataclass(eq=False)
class Request:
    """One actor call the schedule runs. sink gets ("requeued" | "end" | "cancelled" | "error", request).

    rank: a slot's preference (lower first) or None where the request must not run; None: any slot.
    hold: the request waits while this returns False (a build waiting for the driver's profile, a generator
    while the forge's others hold all but one actor); asked again before each placement.
    limit_s counts from when the actor was up, or from dispatch (from_dispatch: a generator's timeout); a
    task past it has its actor replaced, counted as a failure unless failure_on_timeout is False.
    on_driver: no actor call; the slot is only held idle while the driver times on its GPU (release())."""

    method: str
    args: tuple
    module: str
    limit_s: float
    name: str = ""
    payload: Any = None
    cost: float = 0.0
    timing: bool = False         # a timing session: before any build, and never two at once on one device
    urgent: bool = False         # after timing calls, before builds (the kernel forge's tasks)
    from_dispatch: bool = False
    failure_on_timeout: bool = True
    on_cpu: bool = False          # it times on the host's CPUs (then every actor of a node is on that one device)
    group: int = 0
    rank: Callable[[Slot], int | None] | None = None
    hold: Callable[[], bool] | None = None
    on_driver: bool = False
    keep_slot: bool = False       # its actor gets nothing else until the owner has taken the result (handed_on)
    on_start: Callable[["Request"], None] | None = None   # called on the loop's thread as it starts
    error: BaseException | None = None   # what on_start raised (the sink gets ("error", request))
    sink: queue.Queue | None = None
    seq: int = 0
    state: str = "new"            # queued, running, ended, cancelled
    task: Task | None = None
    slot: Slot | None = None
    unrun: str = ""               # why it never ran (no actor left; failures.outcome words it)
    lost_logs: list = dataclasses.field(default_factory=list)   # the actor logs of attempts lost with a node
    started: threading.Event = dataclasses.field(default_factory=threading.Event)
    done: threading.Event = dataclasses.field(default_factory=threading.Event)

    def _tell(self, what: str) -> None:
        if self.sink is not None:
            self.sink.put((what, self))


def device_of(slot: Slot, request: Request) -> tuple:
    """The device request would time on in slot: the node's CPUs for a CPU timing, else the slot's GPU(s)."""
    info = slot.identity()
    node = info.get("node_id") or info.get("node") or ""
    if request.on_cpu:
        return node, "cpu"
    return node, ",".join(info.get("gpu_ids") or []) or f"slot {slot.index}"


def in_order(waiting: list[Request]) -> list[Request]:
    """The order in which waiting requests get an idle actor: timing calls first, then urgent work (each in
    the order queued), then builds by the expected cost of their module's next build, costliest first; a
    module's own builds in the order its strategy gave them."""
    heads: dict[int, float] = {}
    for request in sorted(waiting, key=lambda r: r.seq):   # each module's next build sets its cost
        if not (request.timing or request.urgent):
            heads.setdefault(request.group, request.cost)

    def key(request: Request) -> tuple:
        if request.timing:
            return (0, 0.0, request.seq)
        if request.urgent:
            return (1, 0.0, request.seq)
        return (2, -heads[request.group], request.seq)

    return sorted(waiting, key=key)


class Schedule:
    def __init__(self, pool: ActorPool):
        self.pool = pool
        self.costs = Costs()
        self.runner = TaskRunner(pool)
        self._lock = threading.RLock()
        self._queue: list[Request] = []
        self._seq = itertools.count(1)
        self._front = itertools.count(-1, -1)
        self._closed = False
        self._seen: set = set()      # actors' start refs already seen ready
        self._kept: set[Request] = set()   # ended keep_slot requests whose owner has not taken the result yet
        self.lost = 0                # tasks queued again because their node left (their logs are kept)
        self._timing_on: dict[tuple, Request] = {}   # device -> the timing session running there
        self._grown_at = time.monotonic()            # when the loop last asked the pool to grow
        here = ray.get_runtime_context().get_node_id()
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(here, soft=True)
        self._bell_class = ray.remote(Bell).options(num_cpus=0, scheduling_strategy=strategy)
        self._bell = self._bell_class.remote()
        self._bell_ref = self._bell.wait.remote()
        self._thread = threading.Thread(target=self._loop, name="aitune-ray-schedule", daemon=True)
        pool.listeners.append(self.ring)
        self._thread.start()

    # ----- for run handles and the executor -------------------------------------------------------
    def submit(self, *requests: Request, front: bool = False) -> None:
        """Queue requests (front: before the module's other queued work, e.g. a build whose plan is ready)."""
        with self._lock:
            for request in requests:
                if self._closed:
                    request.state, request.unrun = "ended", "the executor was closed"
                    request.started.set()
                    request.done.set()
                    request._tell("end")
                    continue
                request.seq = next(self._front if front else self._seq)
                request.state = "queued"
                self._queue.append(request)
        self.ring()

    def wait(self, request: Request) -> Request:
        """Block until request ended (or was cancelled); Ctrl-C cancels it."""
        try:
            while not request.done.wait(IDLE_WAKE_S):
                pass
        except KeyboardInterrupt:
            self.cancel([request], "interrupted")
            raise
        return request

    def handed_on(self, request: Request) -> None:
        """The owner of a keep_slot request has taken its result (and released what it no longer needs on that
        actor): the actor may get its next task."""
        with self._lock:
            self._kept.discard(request)
            task, request.keep_slot = request.task, False
            if task is not None and task.keep_slot and task.slot.owner is task and task.slot.busy:
                task.keep_slot = False
                self.pool.free(task.slot)

    def hand_on(self, module: str) -> None:
        """Every result of module that its owner holds an actor for: the module asks something else of the
        executor now (a re-measure, a release), so those actors may get their next tasks."""
        with self._lock:
            for request in [r for r in self._kept if r.module == module]:
                self.handed_on(request)

    def release(self, request: Request) -> None:
        """An on_driver request's slot is free again (the driver's timing is over)."""
        with self._lock:
            self._timing_over(request)
            if request.state == "running" and request.slot is not None:
                request.state = "ended"
                self.pool.free(request.slot)
            request.done.set()

    def cancel(self, requests: list[Request], reason: str, replace: bool = True) -> list[Request]:
        """Drop the queued ones and kill the running ones (their actors are replaced, not counted as failures;
        replace=False: only killed, as the pool is shutting down). Returns the requests that were running."""
        stopped = []
        with self._lock:
            for request in requests:
                if request.state == "queued":
                    self._queue.remove(request)
                elif request.state == "running":
                    stopped.append(request)
                    self._timing_over(request)
                    if request.task is not None:
                        self.runner.inflight.pop(request.task.ref, None)
                        if replace:
                            self.pool.replace(request.task.slot, reason, failure=False)
                        else:
                            self.pool.kill(request.task.slot)
                    elif request.slot is not None:
                        self.pool.free(request.slot)
                else:
                    continue
                request.state = "cancelled"
                request.started.set()
                request.done.set()
                request._tell("cancelled")
        return stopped

    def cancel_all(self, reason: str, replace: bool = True) -> None:
        """Cancel everything queued or running (Ctrl-C during a job): each owner is told."""
        with self._lock:
            self.cancel(list(self._queue) + [t.payload for t in self.runner.inflight.values()], reason, replace)

    def ring(self) -> None:
        """Wake the loop (new work, or a slot freed by other work); its own thread needs no bell."""
        if threading.current_thread() is not self._thread and not self._closed and self._bell is not None:
            try:
                self._bell.ring.remote()
            except Exception as exc:  # noqa: BLE001 - Ray is going down; the loop wakes on its own
                logger.debug("the schedule's bell did not ring: %s", exc)

    def close(self) -> None:
        """Cancel everything and stop the loop."""
        with self._lock:
            self.cancel_all("the executor was closed", replace=False)
            self._closed = True
        bell, self._bell = self._bell, None
        if bell is None or self.in_loop():
            return
        try:
            bell.ring.remote()
            self._thread.join(timeout=30)
            ray.kill(bell)
        except Exception as exc:  # noqa: BLE001 - already gone with Ray
            logger.debug("the schedule's bell: %s", exc)
        if self.ring in self.pool.listeners:
            self.pool.listeners.remove(self.ring)

    def queued(self) -> list[Request]:
        """The requests waiting for an actor now."""
        with self._lock:
            return list(self._queue)

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    # ----- the loop -------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            if time.monotonic() - self._grown_at >= GROW_EVERY_S:
                self._grown_at = time.monotonic()
                self.pool.grow()   # outside the lock: it asks Ray for the cluster's nodes
            with self._lock:
                if self._closed:
                    return
                self._dispatch()
                self._unrunnable()
                refs = list(self.runner.inflight)
            starting = [s.ready_ref for s in self.pool.slots
                        if s.alive and s.info is None and s.ready_ref is not None and s.ready_ref not in self._seen]
            bell = self._bell_ref
            watched = refs + starting + [bell]
            timeout = self.runner.poll_s(IDLE_WAKE_S) if refs else IDLE_WAKE_S
            try:
                ready, _ = ray.wait(watched, num_returns=1, timeout=timeout)
                if ready:
                    ready, _ = ray.wait(watched, num_returns=len(watched), timeout=0)
            except Exception as exc:  # noqa: BLE001 - Ray is shutting down under the loop
                if self._closed:
                    return
                logger.warning("the schedule's wait failed: %s", exc)
                continue
            if bell in ready:
                self._renew_bell()
            for ref in starting:
                if ref in ready:
                    self._seen.add(ref)
            with self._lock:
                if self._closed:
                    return
                for task in self.runner.collect([r for r in ready if r in refs]):
                    self._ended(task)

    def _renew_bell(self) -> None:
        try:
            ray.get(self._bell_ref)
        except Exception as exc:  # noqa: BLE001 - the bell's actor died (its node left): a new one
            if self._closed:
                return
            logger.info("the schedule's bell is made again: %s", exc)
            self._bell = self._bell_class.remote()
        if not self._closed and self._bell is not None:
            self._bell_ref = self._bell.wait.remote()

    def _dispatch(self) -> None:
        idle = [s for s in self.pool.idle() if s.dispatchable()]
        while idle and self._queue:
            for request in in_order(self._queue):
                if request.hold is not None and not request.hold():
                    continue
                slot = self._pick(request, idle)
                if slot is None:
                    continue
                idle.remove(slot)
                self._queue.remove(request)
                self._start(request, slot)
                break
            else:
                return

    def _pick(self, request: Request, idle: list[Slot]) -> Slot | None:
        if request.timing:   # a device where a timing session runs takes no second one
            idle = [s for s in idle if device_of(s, request) not in self._timing_on]
        if request.rank is None:
            return idle[0] if idle else None
        ranked = [(rank, i, s) for i, s in enumerate(idle) if (rank := request.rank(s)) is not None]
        return min(ranked)[2] if ranked else None

    def _start(self, request: Request, slot: Slot) -> None:
        request.state, request.slot = "running", slot
        if request.timing:
            self._timing_on[device_of(slot, request)] = request
        if request.on_driver:
            slot.busy = True
        else:
            request.task = self.runner.start(slot, request.method, request.args, request.limit_s, payload=request,
                                             name=request.name, keep_slot=request.keep_slot,
                                             from_dispatch=request.from_dispatch,
                                             failure_on_timeout=request.failure_on_timeout)
        request.started.set()
        if request.on_start is not None:
            try:
                request.on_start(request)
            except BaseException as exc:  # noqa: BLE001 - a progress callback's Ctrl-C: raised by the owner
                request.error = exc
                request._tell("error")

    def _timing_over(self, request: Request) -> None:
        for device, running in list(self._timing_on.items()):
            if running is request:
                del self._timing_on[device]

    def _ended(self, task: Task) -> None:
        request: Request = task.payload
        if request.state != "running":
            return
        self._timing_over(request)
        if task.node_lost and len(request.lost_logs) < NODE_LOSS_RETRIES:
            request.lost_logs.append(task.log_path)
            self.lost += 1
            logger.warning("%s: its node left the cluster; it runs again elsewhere (actor log: %s)",
                           request.name or request.method, task.log_path)
            request.task, request.slot, request.state = None, None, "queued"
            self._queue.append(request)
            request._tell("requeued")
            return
        request.task, request.state = task, "ended"
        if task.keep_slot and task.slot.busy:
            self._kept.add(request)
        request.done.set()
        request._tell("end")

    def _unrunnable(self) -> None:
        """With every slot retired, what is queued can never run: it ends, saying why."""
        if not self._queue or self.runner.inflight or self.pool.alive():
            return
        for request in list(self._queue):
            self._queue.remove(request)
            request.state = "ended"
            request.unrun = (f"every actor slot used up its max_actor_restarts={self.pool.max_restarts} "
                             "replacements")
            request.started.set()
            request.done.set()
            request._tell("end")
