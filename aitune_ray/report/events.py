"""Progress events: recording them during a job, and turning them into the schedule's task spans.

An event is a plain dict that an executor emits for one candidate (or one other task) of one module:
module, key, backend, event ("queued", "building", "checking", "measuring", "planning", "remeasuring",
"done", ...), status, node, gpu, task ("build", "baseline", "remeasure", "forge-benchmark",
"forge-generate", "profile"), elapsed_s and time. Any field may be missing; what is missing is left out
of the picture, never guessed.

The clock rule: every time in a report is the driver's wall clock (time.time()) at the moment the driver
observed the event. Worker clocks are never read, so nodes whose clocks disagree cannot move bars against
each other; the price is that a bar starts when the driver dispatched or learned of the work, so it also
holds the dispatch and result latency (a bar is an upper bound of the work it shows). An event that already
carries "time" (an executor that stamps its own events with the driver's clock) keeps it.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from typing import Callable, Iterable

#: Events that end a task; every other event starts a phase that lasts until the next event of that task.
TERMINAL = {"done", "failed", "cancelled", "finished"}
#: Phases that are waiting, not work: no bar is drawn for them.
WAITING = {"queued"}
#: Phase names shown in the timeline for the events that start them.
PHASES = {"building": "build", "checking": "check", "measuring": "profile", "remeasuring": "re-measure",
          "planning": "plan", "benchmarking": "provider benchmark", "generating": "generator",
          "profiling": "profile", "baseline": "baseline"}
#: Task names (the events' "task" field) shown for a phase whose event is not in PHASES.
TASKS = {"forge-benchmark": "provider benchmark", "forge-generate": "generator", "remeasure": "re-measure",
         "baseline": "baseline", "profile": "profile", "build": "build"}
DRIVER = "driver"


class EventRecorder:
    """A progress callback that keeps every event (stamped with the driver's clock) and passes it on.

    listeners: further callbacks (a live display); one that raises does not stop the recording.
    """

    def __init__(self, *listeners: Callable[[dict], None]):
        self.listeners = [listener for listener in listeners if listener is not None]
        self.started = time.time()
        self._events: list[dict] = []
        self._lock = threading.Lock()

    def __call__(self, event: dict) -> None:
        event = dict(event)
        event.setdefault("time", time.time())
        with self._lock:
            self._events.append(event)
        for listener in self.listeners:
            listener(event)

    @property
    def events(self) -> list[dict]:
        with self._lock:
            return [dict(e) for e in self._events]


@dataclasses.dataclass
class Span:
    """One bar of the timeline: a phase of one task of one candidate on one actor."""

    row: str          # the actor: "GPU @ node", or "driver" when the event names none
    module: str
    candidate: str    # the backend's name (or the key when there is no name)
    key: str
    phase: str        # build, check, profile, re-measure, plan, provider benchmark, generator, baseline
    start: float      # driver wall clock, seconds since the epoch
    end: float
    status: str       # the outcome of the task this phase belongs to ("ok", "error", "crashed", ...)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_UUID = re.compile(r"\s*\((GPU|MIG)-[0-9A-Fa-f-]+\)")


def actor_row(node: str | None, gpu: str | None) -> str:
    """A short row label for an actor: its GPU (without the device UUID) at its node."""
    gpu = _UUID.sub("", str(gpu or "")).strip()
    node = str(node or "").strip()
    if not gpu and not node:
        return DRIVER
    return f"{gpu or '?'} @ {node}" if node else gpu


def spans(events: Iterable[dict]) -> list[Span]:
    """The bars of the schedule: each task's events in time order, one bar per phase of work.

    A phase runs from its event to the next event of the same task (module, key, task); the terminal
    event gives the whole task its outcome and, where the phase's own event named no actor, its actor.
    A phase still open at the end (the job was stopped) ends at the last event seen, as "unfinished".
    """
    events = [e for e in events if isinstance(e, dict) and isinstance(e.get("time"), (int, float))]
    if not events:
        return []
    last = max(e["time"] for e in events)
    tasks: dict[tuple, list[dict]] = {}
    for event in sorted(events, key=lambda e: e["time"]):
        ident = (event.get("module", ""), event.get("key") or event.get("backend", ""), event.get("task", ""))
        tasks.setdefault(ident, []).append(event)
    out: list[Span] = []
    for (module, key, task), items in tasks.items():
        pending: list[tuple[dict, float]] = []   # (phase event, its end) awaiting the task's outcome
        opened: dict | None = None
        for event in items:
            if opened is not None:
                pending.append((opened, event["time"]))
                opened = None
            name = event.get("event", "")
            if name in TERMINAL:
                out += [_span(e, end, event, module, key, task) for e, end in pending if e.get("event") not in WAITING]
                pending = []
            else:
                opened = event
        if opened is not None:
            pending.append((opened, last))
        closing = {"status": "unfinished"}
        out += [_span(e, end, closing, module, key, task) for e, end in pending if e.get("event") not in WAITING]
    return sorted(out, key=lambda s: (s.start, s.row))


def _span(event: dict, end: float, outcome: dict, module: str, key: str, task: str) -> Span:
    node, gpu = event.get("node"), event.get("gpu")
    if not node and not gpu:
        node, gpu = outcome.get("node"), outcome.get("gpu")
    # A candidate's build task shows its phases (build, check, profile); any other task is one kind of work.
    if task and task != "build" and task in TASKS:
        phase = TASKS[task]
    else:
        phase = PHASES.get(event.get("event", "")) or TASKS.get(task) or event.get("event") or task or "task"
    return Span(row=actor_row(node, gpu), module=str(module), candidate=str(event.get("backend") or key),
                key=str(key), phase=phase, start=float(event["time"]), end=max(float(end), float(event["time"])),
                status=str(outcome.get("status") or "ok"))
