"""The executor seam: strategies hand candidate jobs to an executor and decide on the results."""

from __future__ import annotations

import dataclasses
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from aitune_ray.backend.backend import Backend
from aitune_ray.measure.timing import MeasureConfig, Timing
from aitune_ray.results import BuildResult, CandidateJob
from aitune_ray.samples import SampleStore


@dataclasses.dataclass
class TuneContext:
    """One module being tuned: its eager module, its recorded samples and where it runs."""

    name: str
    module: nn.Module
    samples: SampleStore
    device: torch.device
    workdir: Path = dataclasses.field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="aitune-ray-")))
    measure: MeasureConfig = dataclasses.field(default_factory=MeasureConfig)
    report: Any = None    # the strategy's ModuleReport, kept here so a failed tuning still reports


class RunHandle(ABC):
    """Results of a batch of candidate jobs, yielded in the order they complete."""

    @abstractmethod
    def __iter__(self) -> Iterator[BuildResult]:
        ...

    @abstractmethod
    def cancel(self) -> None:
        """Stop what has not finished; no more results are yielded afterwards."""


class Executor(ABC):
    """Runs candidate jobs. InlineExecutor runs them here; RayExecutor on GPU-pinned actors."""

    def open(self) -> None:
        """Acquire resources (start Ray, create actors). Called before the first module is tuned."""

    def close(self) -> None:
        """Release what open() acquired."""

    def resolve_device(self, device) -> torch.device:
        """The device to tune for. Here: one this process has (None: its GPU, else the CPU)."""
        from aitune_ray.device import resolve_device

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

    def remeasure(self, context: TuneContext, results: list[BuildResult],
                  baseline: dict[int, Timing]) -> dict[int, Timing] | None:
        """Re-time finalists and eager side by side (A B A B ...) on one device, filling each
        result.remeasured. Returns the re-measured eager baseline, or None when this executor does not
        re-measure (then the first numbers decide)."""
        return None

    @abstractmethod
    def materialize(self, context: TuneContext, result: BuildResult) -> Backend:
        """A live, active backend on the driver for a chosen result."""

    def discard(self, context: TuneContext) -> None:
        """Forget the built backends of this module that were not chosen."""
