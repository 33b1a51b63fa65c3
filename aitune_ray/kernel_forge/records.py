"""Plain-data records of the kernel search: what crosses a process boundary, never a live object."""

from __future__ import annotations

import dataclasses
from typing import Any

from aitune_ray.records.results import ERROR, OK, OOM, REJECTED, TIMED_OUT

UNSUPPORTED = "unsupported"   # prepare() said a sample is not supported (or a library is missing)
ORIGINAL = "original"         # the description of the unreplaced function's own record

__all__ = ["ERROR", "GenerationOutcome", "OK", "OOM", "ORIGINAL", "ProviderBenchmark", "REJECTED",
           "TIMED_OUT", "UNSUPPORTED"]


@dataclasses.dataclass
class ProviderBenchmark:
    """One (function, provider) pair checked and timed on the function's recorded samples.

    provider: the provider's to_dict() (prepared, when preparation succeeded). max_error: the worst
    relative L2 error over the distinct samples (None when never compared). median_ms: the time of one
    pass over the GCD-reduced call mix.
    """

    function: str
    description: str
    status: str
    provider: dict | None = None
    source: str = "provider"           # "provider", "generator:<name>" or "original"
    error: str = ""
    max_error: float | None = None
    tolerance: float | None = None
    samples_compared: int = 0
    median_ms: float | None = None
    cv: float | None = None
    runs: int = 0
    mix_calls: int = 0
    device: str = ""
    gpu: str = ""
    node: str = ""                     # the machine that measured it, where an executor knows it
    seconds: float = 0.0
    speedup: float | None = None       # original median / this median, set by the optimizer
    selected: bool = False
    #: An interleaved re-measure against the original on one GPU (gpu, node, rounds, median_ms,
    #: original_ms, speedup, raw_speedup), when the optimizer made one; None otherwise.
    remeasured: dict | None = None
    #: The live provider on the process that ran this (driver-local only; never serialized).
    live: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "live"}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "ProviderBenchmark":
        return cls(**{k: v for k, v in data.items() if k != "live"})


@dataclasses.dataclass
class GenerationOutcome:
    """One generator run for one function: the provider it made (to_dict) or why not."""

    function: str
    generator: str
    status: str
    description: str = ""
    provider: dict | None = None
    error: str = ""
    seconds: float = 0.0
    live: Any = dataclasses.field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "live"}

    @classmethod
    def from_dict(cls, data: dict) -> "GenerationOutcome":
        return cls(**{k: v for k, v in data.items() if k != "live"})
