"""The one way this library times anything: a TimingRequest, plain data, run where the callables live.

A request says what to call (names, the first the baseline), on which device, in which serving context (the
thread that calls: always the calling one; the torch thread count; the kind of process), how (PAIRED:
shuffled rounds side by side, paired by index; ALONE: each callable under the stop rule of its MeasureConfig),
how many rounds, and the measuring settings (burst length and the rest, a MeasureConfig's dict). It crosses
processes as a dict; run() binds it to the live callables in the process that measures and returns a
TimingSession: the timings, the context the session actually ran in, and why it failed where it did.

Every timing path goes through it: the eager baseline, each candidate's profile and screening, the confirm
session, the kernel forge's timings, the post-deploy and as-loaded checks. The round counts of each purpose
have their defaults here (DEFAULT_ROUNDS) and travel in the request from there.

The serving context. A figure holds in the context it was measured in: on the CPU, a call with 1 torch thread
and the same call with 2 differ by up to 2x, and not alike for eager and a compiled candidate. So the session
runs with the request's torch thread count set for its duration and restored after (an actor's one thread
becomes the user's two), and a callable that changes the thread count meanwhile fails the session (its
figure would hold in no context at all).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Callable, Iterator

import torch

from aitune_ray.measure import timing
from aitune_ray.measure.timing import MeasureConfig, Timing

logger = logging.getLogger(__name__)

PAIRED, ALONE = "paired", "alone"

#: Purposes of a timing, with their default paired rounds per recorded batch size (0: ALONE, the stop rule).
#: confirm: chosen with the simulation of aitune_ray.testing.sessions (tests/test_decision_procedure.py,
#: benchmarks/decisions.py): at 10% noise per timing it accepts a candidate truly 1.10x faster everywhere in at
#: least 95% of tunings beside two slower finalists (K = 3): 86% with 40 rounds, 94% with 50, 98% with 60.
#: screen: a few rounds right after each build, to rank and prune (aitune_ray.decision.screen).
#: deploy: the post-deploy and as-loaded checks (information, judged against the decision's interval).
DEFAULT_ROUNDS = {"baseline": 0, "profile": 0, "screen": 8, "confirm": 60, "deploy": 20, "loaded": 20,
                  "kernel": 0, "kernel-confirm": 60}

#: The sessions whose figure over the recorded calls is shown: each also times passes over the recorded calls
#: in their order (timing.profile_side_by_side's mix), so that figure is measured as a serving loop reads it.
MIX_PURPOSES = ("confirm", "deploy", "loaded")

#: The kind of process this one is, for the sessions it runs: "driver" (the user's, that called tune()),
#: "actor" (a Ray tuner actor) or "child" (a contained build). Set once at a process's start (set_process_kind).
_process_kind = "driver"


#: How a context names a process other than the driver (the user's own, which serves).
PROCESS_WORDS = {"actor": "in a Ray actor", "child": "in a build process"}


def set_process_kind(kind: str) -> None:
    global _process_kind
    _process_kind = kind


def process_kind() -> str:
    return _process_kind


@dataclasses.dataclass(frozen=True)
class ServingContext:
    """Where a figure holds: the torch thread count the calls ran with (0: whatever the measuring process has),
    the kind of process, and the thread: always the calling one, which serves."""

    torch_threads: int = 0
    process: str = ""
    thread: str = "calling"

    @classmethod
    def of_this_process(cls) -> "ServingContext":
        """The context of the calling process as it is now: the default serving context of tune()."""
        return cls(torch.get_num_threads(), process_kind())

    def describe(self, device, process: bool = True) -> str:
        """'cpu with 2 torch threads' (the device type, then the thread count where one is set), then the
        process where it is not the one that called tune() ('in a Ray actor'), unless process is False."""
        kind = torch.device(device).type if device is not None else "?"
        if self.torch_threads:
            kind += f" with {self.torch_threads} torch thread{'s' if self.torch_threads != 1 else ''}"
        where = PROCESS_WORDS.get(self.process, "")
        return f"{kind} {where}" if process and where else kind

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "ServingContext":
        return cls(**(data or {}))

    @contextlib.contextmanager
    def applied(self) -> Iterator["ServingContext"]:
        """Run the body with this context's torch thread count, restored after; yields the context the body
        runs in (this process's kind, the thread count in force)."""
        before = torch.get_num_threads()
        if self.torch_threads and self.torch_threads != before:
            torch.set_num_threads(self.torch_threads)
        try:
            yield ServingContext(torch.get_num_threads(), process_kind())
        finally:
            if torch.get_num_threads() != before:
                torch.set_num_threads(before)


@dataclasses.dataclass
class TimingRequest:
    """One timing session, asked for: see the module docstring. rounds: paired rounds per group (PAIRED);
    ALONE ignores it and follows the MeasureConfig's stop rule. measure: a MeasureConfig's dict (burst length,
    warm-up, settle time); {} for the defaults. names: what is called, in order, the first the baseline
    ((): whatever run() is given)."""

    purpose: str
    device: str = "cpu"
    rounds: int = 0
    context: ServingContext = dataclasses.field(default_factory=ServingContext)
    measure: dict = dataclasses.field(default_factory=dict)
    mode: str = PAIRED
    names: tuple = ()
    seed: int = 0
    mix: bool = False   # also a pass over the recorded calls in their order (MIX_PURPOSES)

    def __post_init__(self):
        if isinstance(self.context, dict):
            self.context = ServingContext.from_dict(self.context)
        if isinstance(self.measure, MeasureConfig):
            self.measure = self.measure.to_dict()
        self.names = tuple(self.names)
        self.device = str(self.device)
        if self.mode not in (PAIRED, ALONE):
            raise ValueError(f"a timing request's mode is {PAIRED!r} or {ALONE!r}, not {self.mode!r}")

    @classmethod
    def paired(cls, purpose: str, device, context: ServingContext | None = None, rounds: int | None = None,
               measure: MeasureConfig | dict | None = None, **extra) -> "TimingRequest":
        """Paired shuffled rounds; rounds None: DEFAULT_ROUNDS[purpose]."""
        extra.setdefault("mix", purpose in MIX_PURPOSES)
        return cls(purpose, str(device), DEFAULT_ROUNDS[purpose] if rounds is None else rounds,
                   context or ServingContext(), _plain(measure), PAIRED, **extra)

    @classmethod
    def alone(cls, purpose: str, device, context: ServingContext | None = None,
              measure: MeasureConfig | dict | None = None, **extra) -> "TimingRequest":
        """Each callable timed alone under the stop rule of measure."""
        return cls(purpose, str(device), 0, context or ServingContext(), _plain(measure), ALONE, **extra)

    @property
    def config(self) -> MeasureConfig:
        return MeasureConfig.from_dict(self.measure) if self.measure else MeasureConfig()

    @property
    def burst_ms(self) -> float:
        """How long a burst lasts at least on this request's device."""
        return self.config.burst_target(torch.device(self.device))[0]

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["names"] = list(self.names)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "TimingRequest":
        return cls(**data)

    def with_rounds(self, rounds: int) -> "TimingRequest":
        return dataclasses.replace(self, rounds=rounds)

    def in_context(self, context: ServingContext) -> "TimingRequest":
        return dataclasses.replace(self, context=context)

    # ----- running it, where the callables live ------------------------------------------------------

    def run(self, calls: dict[str, Callable], samples, device: torch.device | None = None) -> "TimingSession":
        """Time calls (name -> call(*args, **kwargs)) on the recorded samples, grouped by batch size: each
        call first sees every size (timing.see_every_size), then each size is timed as this request says."""
        device = torch.device(device if device is not None else self.device)

        def body():
            if self.mode == ALONE:
                return {name: timing.profile_samples(call, samples, device, self.config)
                        for name, call in calls.items()}
            return timing.profile_side_by_side(calls, samples, device, self._rounds(), self.config, self.seed,
                                               mix=self.mix)

        return self._session(list(calls), device, body)

    def run_groups(self, groups: dict, device: torch.device | None = None,
                   batch_sizes: dict | None = None) -> "TimingSession":
        """Time groups (group key -> {name: fn()}, every group with the same names, the baseline first) one
        group at a time. ALONE: each fn under the stop rule, its Timing's batch size batch_sizes[group] (else
        the group key where it is an int, else 0)."""
        device = torch.device(device if device is not None else self.device)
        names = list(next(iter(groups.values()), {}))

        def body():
            if self.mode == PAIRED:
                return timing.paired_rounds(groups, device, self._rounds(), self.config, self.seed)
            sizes = batch_sizes or {}
            return {name: {g: timing.measure(fns[name], device,
                                             sizes.get(g, g if isinstance(g, int) else 0), self.config)
                           for g, fns in groups.items()} for name in names}

        return self._session(names, device, body)

    def _rounds(self) -> int:
        if self.rounds < 1:
            raise ValueError(f"a {self.purpose} session of paired rounds needs at least one round, got {self.rounds}")
        return self.rounds

    def _session(self, names: list, device: torch.device, body) -> "TimingSession":
        with self.context.applied() as ran_in:
            threads = (torch.get_num_threads(), torch.get_num_interop_threads())
            out = body()
            now = (torch.get_num_threads(), torch.get_num_interop_threads())
        if now != threads:
            raise ThreadsChanged(f"a callable changed the process's threads (intra-op, inter-op) from {threads} "
                                 f"to {now}")
        return TimingSession(self, out, ran_in, str(device))


class ThreadsChanged(RuntimeError):
    """A timed callable changed the process's thread settings: the session's figures hold in no context."""


@dataclasses.dataclass
class TimingSession:
    """What a TimingRequest measured: timings (name -> group -> Timing; PAIRED: rounds_ms paired by index), the
    context the calls ran in, and the device."""

    request: TimingRequest
    timings: dict
    context: ServingContext
    device: str = ""

    def rounds_ms(self, name: str) -> dict:
        """name's per-round times by group."""
        return {g: list(t.rounds_ms) for g, t in self.timings[name].items()}

    def plain(self, name: str) -> dict:
        """name's timings as plain data (group -> Timing.to_dict()), to cross processes."""
        return {g: t.to_dict() for g, t in self.timings[name].items()}

    def describe(self) -> str:
        return self.context.describe(self.device or self.request.device)

    def to_dict(self) -> dict:
        return {"request": self.request.to_dict(), "context": self.context.to_dict(), "device": self.device,
                "timings": {name: self.plain(name) for name in self.timings}}

    @classmethod
    def from_dict(cls, data: dict) -> "TimingSession":
        return cls(TimingRequest.from_dict(data["request"]),
                   {name: {g: Timing.from_dict(t) for g, t in per.items()} for name, per in data["timings"].items()},
                   ServingContext.from_dict(data.get("context")), data.get("device", ""))


def _plain(measure) -> dict:
    if measure is None:
        return {}
    return measure.to_dict() if isinstance(measure, MeasureConfig) else dict(measure)
