"""The executor seam: strategies hand candidate jobs to an executor and decide on the results.

Every executor reports what it does as progress events, one plain dict each, to its ``progress`` sink
(a callable; the CLI prints them, a live view draws them) and on the "aitune_ray.progress" logger:

    module, key, backend   the module and the candidate ("" for a module-wide task such as the baseline)
    task                   build, baseline, remeasure, profile, forge-benchmark, forge-generate, ...
    event                  queued, planning, building, checking, measuring, remeasuring, done
    status                 "running" until the "done" event, which carries the outcome (ok, error, ...)
    node, gpu              where it runs (the driver's for planning)
    elapsed_s              seconds since the task started (0 at its start)
    time                   the driver's wall clock (time.time()) when the event was observed
Each task's first event marks its start and its "done" event its end, on the node and GPU named.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

from aitune_ray.runtime import tempdirs
from aitune_ray.backend.backend import Backend
from aitune_ray.decision.session import Session
from aitune_ray.records.failures import outcome
from aitune_ray.measure.request import ServingContext, TimingRequest
from aitune_ray.measure.timing import MeasureConfig, Timing
from aitune_ray.records.results import BuildResult, CandidateJob
from aitune_ray.model.samples import SampleStore

logger = logging.getLogger(__name__)
progress_logger = logging.getLogger("aitune_ray.progress")

#: The events of a task, in the order they can occur.
EVENTS = ("queued", "planning", "building", "checking", "measuring", "remeasuring", "done")
RUNNING = "running"


@dataclasses.dataclass
class TuneContext:
    """One module being tuned: its eager module, its recorded samples and where it runs."""

    name: str
    module: nn.Module
    samples: SampleStore
    device: torch.device
    workdir: Path = dataclasses.field(default_factory=lambda: tempdirs.make("work"))
    measure: MeasureConfig = dataclasses.field(default_factory=MeasureConfig)
    report: Any = None    # the strategy's ModuleReport, kept here so a failed tuning still reports
    serving: ServingContext = dataclasses.field(default_factory=ServingContext)   # where the figures must hold

    def timing(self, purpose: str, rounds: int | None = None) -> TimingRequest:
        """The timing request of purpose for this module: its device, measuring settings and serving context;
        rounds None: the purpose's default (aitune_ray.measure.request.DEFAULT_ROUNDS). A purpose of 0 default
        rounds is timed alone, under the stop rule."""
        from aitune_ray.measure.request import DEFAULT_ROUNDS

        if rounds is None and not DEFAULT_ROUNDS[purpose]:
            return TimingRequest.alone(purpose, self.device, self.serving, self.measure)
        return TimingRequest.paired(purpose, self.device, self.serving, rounds, self.measure)


class RunHandle(ABC):
    """Results of a batch of candidate jobs, yielded in the order they complete."""

    @abstractmethod
    def __iter__(self) -> Iterator[BuildResult]:
        ...

    @abstractmethod
    def cancel(self) -> None:
        """Stop what has not finished; no more results are yielded afterwards."""


class Executor(ABC):
    """Runs candidate jobs. InlineExecutor runs them here; RayExecutor on GPU-pinned actors.

    progress: called with every progress event (see the module docstring); None: logged only."""

    progress: Callable[[dict], None] | None = None
    # Capabilities (a wrapper such as run_dir.JournalingExecutor passes each on):
    # watch_build(context, job, in_process): a context manager that an inline build runs in (in_process: in
    # this very process, where its crash ends the process). A run folder's journal sets it to record the
    # build as started, and a fatal signal during it (aitune_ray.executors.run_dir); None: nobody watches.
    watch_build: Callable[["TuneContext", CandidateJob, bool], Any] | None = None
    # True where every module's work shares one job-level schedule, so that modules are tuned at once (each on
    # a driver thread of its own) and each decides as soon as its own work is done; else one after another
    concurrent_modules: bool = False
    # The GPU kind the executor's devices are of, where the job named one (checkpoints record it per decision)
    gpu_kind: str | None = None

    def emit(self, context: TuneContext, event: str, *, task: str = "build", job: CandidateJob | None = None,
             status: str = RUNNING, where: dict | None = None, elapsed_s: float = 0.0, **extra: Any) -> dict:
        """Send one progress event to the sink and the progress logger. A sink that raises is logged,
        except KeyboardInterrupt (Ctrl-C in a callback stops the run)."""
        where = where or {}
        record = {"module": context.name, "key": job.key if job else "", "backend": job.backend_name if job else "",
                  "event": event, "status": status, "node": where.get("node", ""), "gpu": where.get("gpu", ""),
                  "task": task, "elapsed_s": round(elapsed_s, 3), "time": time.time(), **extra}
        progress_logger.info("%s %s %s [%s] %s %s on %s %s after %.1fs", record["module"], task, record["backend"],
                             record["key"], event, status, record["node"], record["gpu"], elapsed_s)
        if self.progress is not None:
            try:
                self.progress(record)
            except Exception:
                logger.exception("the progress callback raised")
        return record

    def open(self) -> None:
        """Acquire resources (start Ray, create actors). Called before the first module is tuned."""

    def close(self) -> None:
        """Release what open() acquired."""

    def resolve_device(self, device) -> torch.device:
        """The device to tune for. Here: one this process has (None: its GPU, else the CPU)."""
        from aitune_ray.runtime.device import resolve_device

        return resolve_device(device)

    def __enter__(self) -> "Executor":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @abstractmethod
    def baseline(self, context: TuneContext) -> dict[int, Timing]:
        """Eager timings of the module at each recorded batch size, measured once per module."""

    @abstractmethod
    def submit(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        """Start the jobs; results come back through the handle in completion order."""

    def submit_early(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        """submit(), called before baseline(context): a parallel executor may start building on the
        devices the baseline does not use. By default the same as submit()."""
        return self.submit(context, jobs)

    def confirm(self, context: TuneContext, results: list[BuildResult]) -> Session:
        """The confirm session of the finalists results (aitune_ray.decision.session): eager, an A/A control
        and each finalist restored as it will be deployed, in paired shuffled rounds per recorded batch size
        on one device of the target kind, from one thread. Fills each result.remeasured with its timings
        there. A session that cannot run is returned failed (Session.failure), never raised."""
        return Session.failure(f"{type(self).__name__} runs no confirm session")

    def release(self, context: TuneContext, result: BuildResult) -> None:
        """result can no longer be chosen (screening left it out): free its build now (by default nothing). A
        released result is still restored from its artifacts or recipe if it is asked for again."""

    @abstractmethod
    def materialize(self, context: TuneContext, result: BuildResult) -> Backend:
        """A live, active backend on the driver for a chosen result."""

    def discard(self, context: TuneContext) -> None:
        """Forget the built backends of this module that were not chosen."""

    def stop_all(self, reason: str) -> None:
        """Cancel every module's queued and running work (Ctrl-C while modules are tuned at once): what waits
        for it raises instead. By default nothing (an executor that tunes one module at a time)."""


def failed_plan(jobs: list[CandidateJob], exc: BaseException, seconds: float, device) -> list[BuildResult]:
    """The result of each job whose shared plan (Backend.plan_key) could not be made."""
    failure = outcome("plan", exc=exc)
    return [BuildResult(key=j.key, backend=j.backend_name, spec=j.spec, status=failure.status,
                        error_type=failure.error_type, error=failure.error, build_s=seconds, device=str(device),
                        exception=exc) for j in jobs]
