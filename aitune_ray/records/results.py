"""Typed records that cross process boundaries: plain data only, never a live object."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from aitune_ray.records.imports import short_name
from aitune_ray.measure.correctness import CorrectnessReport
from aitune_ray.measure.timing import Timing

OK = "ok"
ERROR = "error"            # the build or the first inference raised
REJECTED = "rejected"      # built and ran, but outputs differ from eager beyond tolerance
CRASHED = "crashed"        # the worker process died (segfault, abort)
TIMED_OUT = "timed out"    # the task ran past its timeout and was killed
OOM = "oom"                # out of memory, on the GPU or the host
CANCELLED = "cancelled"    # no longer needed (FirstWins found a winner first, or the job was stopped)
STATUSES = (OK, ERROR, REJECTED, CRASHED, TIMED_OUT, OOM, CANCELLED)


@dataclasses.dataclass
class CandidateJob:
    """One candidate backend to build, check and profile for one module."""

    key: str
    spec: dict                        # Backend.spec(): {"type": "pkg.mod:Class", "config": {...}}
    tolerance: float | None = None    # relative L2 bound; None: the backend's default, else per dtype
    measure: dict = dataclasses.field(default_factory=dict)   # MeasureConfig.to_dict()
    priority: int = 0                 # position in the strategy's list (FirstWins decides in this order)
    screen: dict = dataclasses.field(default_factory=dict)   # TimingRequest.to_dict() of the screening; {}: none
    context: dict = dataclasses.field(default_factory=dict)  # ServingContext.to_dict(): where timings must hold

    @property
    def backend_name(self) -> str:
        """The backend's class name, as reports show it."""
        return short_name(self.spec.get("type", ""))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class BuildResult:
    """What happened to one candidate: status, error, correctness, timings, where it ran, its artifacts."""

    key: str
    backend: str
    spec: dict
    status: str
    error: str = ""
    error_type: str = ""
    build_s: float = 0.0
    total_s: float = 0.0              # build, correctness check and profile together
    correctness: dict | None = None                     # CorrectnessReport.to_dict()
    timings: dict[int, dict] = dataclasses.field(default_factory=dict)   # batch size -> Timing.to_dict()
    device: str = ""
    gpu: str = ""                     # GPU name and index, or "cpu"
    node: str = ""
    log_path: str = ""
    state: dict = dataclasses.field(default_factory=dict)        # Backend.export() state
    artifacts: dict[str, Any] = dataclasses.field(default_factory=dict)  # name -> local path, bytes or URL
    remeasured: dict[int, dict] = dataclasses.field(default_factory=dict)  # its timings in the confirm session
    #: screening right after the build, paired with eager on the same device (decision.screen):
    #: {"eager": {bs: [ms per round]}, "candidate": {bs: [ms per round]}, "rounds": n}; {} when not screened
    screen: dict = dataclasses.field(default_factory=dict)
    peak_memory_bytes: int = 0        # the worker's peak device memory (allocated) so far, after this build
    #: The exception the build raised, where this process has it (never serialized: to_dict leaves it out).
    exception: BaseException | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def correctness_report(self) -> CorrectnessReport | None:
        return CorrectnessReport.from_dict(self.correctness) if self.correctness else None

    def timing(self, batch_size: int) -> Timing | None:
        """The re-measured timing where there is one, else the raw one."""
        data = self.remeasured.get(batch_size) or self.timings.get(batch_size)
        return Timing.from_dict(data) if data else None

    def to_dict(self) -> dict:
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)
                if f.name != "exception"}

    @classmethod
    def from_dict(cls, data: dict) -> "BuildResult":
        data = {k: v for k, v in data.items() if k != "exception"}
        for name in ("timings", "remeasured"):
            data[name] = {int(k): v for k, v in (data.get(name) or {}).items()}
        screen = dict(data.get("screen") or {})   # its rounds by batch size, keyed by int as the call mix is
        for side in ("eager", "candidate"):
            if isinstance(screen.get(side), dict):
                screen[side] = {int(k): v for k, v in screen[side].items()}
        data["screen"] = screen
        return cls(**data)
