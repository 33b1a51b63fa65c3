"""ActorPool: slots, each holding one TunerActor pinned to its GPU (or CPU share).

A slot whose actor died or was killed gets a fresh actor on the same resources. Replacements after a
failure (crash, timeout, out of memory) are limited per slot by max_restarts; a slot that used them up
is retired. Kills that only stop unwanted work (cancel) do not count.

Actors that share GPUs start in two waves, one per GPU first and the others once those have answered (or
after LATER_AFTER_S): aitune_ray.cluster.layout.start_shares says why and how.

The pool grows while a job runs: grow() (the schedule's loop calls it now and then) adds a slot for each
actor the cluster now has room for beyond the pool's slots (sizer: nodes of the job's GPU kind that joined).
It never shrinks: a slot whose node left gets its replacement wherever Ray finds room, a joining node
included. A slot gets work once its actor has started (dispatchable), except the pool's first actors, which
Ray starts where it counted their room.

The pool knows nothing of the work: the job's schedule (cluster.schedule) gives idle slots their tasks.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

import ray

from actors.tuner import TunerActor
from aitune_ray.cluster.layout import start_shares

logger = logging.getLogger(__name__)

LATER_AFTER_S = 60.0   # the second wave starts by then even when an actor of the first has not answered


@dataclasses.dataclass
class Slot:
    index: int
    actor: Any = None                 # ActorHandle, None while retired or not started yet
    num_gpus: float = 0.0             # what its actor asks Ray for
    generation: int = 0
    restarts: int = 0                 # replacements after failures
    log_path: str = ""
    ready_ref: Any = None             # ObjectRef of actor.identity()
    info: dict | None = None          # identity once the actor answered
    busy: bool = False
    owner: Any = None                 # the task its actor runs (or last ran, while the slot is kept for it)
    joined: bool = False              # added by grow(), for room that came after the pool was made

    @property
    def alive(self) -> bool:
        return self.actor is not None

    def ready(self) -> bool:
        """True once the actor has started (its identity call answered); never blocks."""
        if self.info is not None:
            return True
        if self.ready_ref is None:
            return False
        done, _ = ray.wait([self.ready_ref], timeout=0)
        if not done:
            return False
        try:
            self.info = ray.get(self.ready_ref)
        except ray.exceptions.RayError:
            return False
        return True

    def dispatchable(self) -> bool:
        """Whether work may go to this slot now: its actor has started, or it is one of the pool's first (a call
        queued there runs once it is up). A replacement, or a slot added for a node that joined, gets work once
        up: on a cluster that lost a node it may never start."""
        return self.ready() or (self.generation == 1 and not self.joined)

    def identity(self) -> dict:
        self.ready()
        return self.info or {"node": "", "gpu": "", "log_path": self.log_path}


class ActorPool:
    def __init__(self, size: int, *, num_gpus: float, num_cpus: float, max_restarts: int, log_dir: str,
                 limit_bytes: int, artifact_dir: str | None, warm_up: str = "compile", turns: bool = False,
                 resources: dict[str, float] | None = None):
        self.num_cpus = num_cpus   # the GPU share is each slot's (Slot.num_gpus, from start_shares)
        self.num_gpus = num_gpus   # a slot added by grow() asks for this
        self.sizer: Callable[[], int] | None = None   # how many actors the cluster has room for now
        self.warm_up = warm_up
        self.turns = turns         # the actors take turns at their GPU even with all of it (the driver uses it)
        self.resources = resources or {}   # custom resources each actor asks for (a GPU kind's, see cluster.kinds)
        self.max_restarts = max_restarts
        self.log_dir = log_dir
        self.limit_bytes, self.artifact_dir = limit_bytes, artifact_dir
        self._remote = ray.remote(TunerActor)
        self.lock = threading.RLock()
        self.listeners: list = []         # called (no arguments) when a slot becomes idle or is replaced
        self.closed = False
        shares, first = start_shares(size, num_gpus)
        self.slots = [Slot(i, num_gpus=share) for i, share in enumerate(shares)]
        self._later, self._made = self.slots[first:], time.monotonic()   # the second wave, not started yet
        for slot in self.slots[:first]:
            self._spawn(slot)
        if self._later:
            logger.info("%d tuner actor(s) start now, one per GPU; %d more once those have answered", first,
                        len(self._later))

    def _start_later(self) -> None:
        """Start the second wave once every actor of the first has answered or is gone (or LATER_AFTER_S)."""
        if not self._later:
            return
        with self.lock:
            first = [s for s in self.slots if s not in self._later]
            waited = time.monotonic() - self._made
            if self._later and not self.closed and (waited > LATER_AFTER_S or
                                                    all(not s.alive or s.ready() for s in first)):
                later, self._later = self._later, []
                logger.info("starting %d more tuner actor(s), %.1f s after the first", len(later), waited)
                for slot in later:
                    self._spawn(slot)

    def grow(self) -> int:
        """Add and start a slot for each actor the cluster has room for beyond the pool's slots (sizer()); the
        number added. Retired slots still count: growth never undoes a retirement."""
        if self.sizer is None or self.closed:
            return 0
        try:
            target = self.sizer()
        except Exception as exc:  # noqa: BLE001 - no node of the kind just now, or Ray going down: look later
            logger.debug("the cluster's room for actors is not known now: %s", exc)
            return 0
        with self.lock:
            if self.closed or target <= len(self.slots):
                return 0
            added = [Slot(len(self.slots) + i, num_gpus=self.num_gpus, joined=True)
                     for i in range(target - len(self.slots))]
            self.slots = self.slots + added   # a new list: threads iterating the old one see it whole
            for slot in added:
                self._spawn(slot)
        logger.info("the cluster has room for %d more tuner actor(s) (nodes joined): starting them", len(added))
        self.changed()
        return len(added)

    def _spawn(self, slot: Slot) -> None:
        slot.generation += 1
        slot.log_path = str(Path(self.log_dir) / f"actor{slot.index}.{slot.generation}.log")
        slot.actor = self._remote.options(num_gpus=slot.num_gpus, num_cpus=self.num_cpus, max_restarts=0,
                                          max_concurrency=1, scheduling_strategy="SPREAD",
                                          resources=self.resources).remote(
            slot.index, slot.log_path, self.limit_bytes, self.artifact_dir, self.warm_up, slot.num_gpus or 1.0,
            self.turns)
        slot.ready_ref = slot.actor.identity.remote()
        slot.info = None
        slot.busy, slot.owner = False, None
        logger.debug("slot %d: actor generation %d, log %s", slot.index, slot.generation, slot.log_path)

    def free(self, slot: Slot) -> None:
        """slot's task ended: it is idle again (and holds nothing of it: the task's payload may hold a whole
        module's tuning state)."""
        slot.busy, slot.owner = False, None
        self.changed()

    def changed(self) -> None:
        """Tell the listeners that a slot may be idle now."""
        for listener in list(self.listeners):
            listener()

    def alive(self) -> list[Slot]:
        self._start_later()
        return [s for s in self.slots if s.alive]

    def idle(self) -> list[Slot]:
        self._start_later()
        return [s for s in self.slots if s.alive and not s.busy]

    def replace(self, slot: Slot, reason: str, failure: bool = True) -> bool:
        """Kill slot's actor and start a fresh one there. Returns False when the slot is retired instead
        (or the pool was shut down: a thread still finishing its work then starts nothing new)."""
        with self.lock:
            self.kill(slot)
            if self.closed:
                return False
            if failure:
                slot.restarts += 1
                if slot.restarts > self.max_restarts:
                    logger.error("slot %d retired after %d failures (last: %s)", slot.index, slot.restarts, reason)
                    return False
            logger.warning("slot %d: replacing its actor (%s)", slot.index, reason)
            self._spawn(slot)
        self.changed()
        return True

    def kill(self, slot: Slot) -> None:
        if slot.actor is not None:
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception as exc:  # already gone
                logger.debug("kill of slot %d: %s", slot.index, exc)
        slot.actor, slot.ready_ref, slot.info, slot.busy, slot.owner = None, None, None, False, None

    def shutdown(self, cleanup_timeout_s: float = 10.0) -> None:
        """Ask the idle actors to remove their work folders (a busy or dead one cannot, and one still starting
        has made none: it is not waited for), then kill them all."""
        with self.lock:
            self.closed = True
            refs = [s.actor.cleanup.remote() for s in self.slots if s.alive and not s.busy and s.ready()]
            if refs:
                ray.wait(refs, num_returns=len(refs), timeout=cleanup_timeout_s)
            for slot in self.slots:
                self.kill(slot)
