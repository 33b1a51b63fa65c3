"""profile(): run one representative input and report where the time goes, as AITune's profile() does."""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from aitune_ray.errors import AITuneRayError, ConfigError, NotCallableError
from aitune_ray.performance.capture import run_profiled
from aitune_ray.performance.markdown import render
from aitune_ray.performance.regions import find_regions, type_name
from aitune_ray.version import __version__

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class PerformanceProfile:
    """What profile() measured. data: plain, JSON-ready data (AITune's keys: schema_version, created_at,
    aitune_version, config, target, input, runs, profiler, regions, warnings); trace_file: the Chrome trace
    written, or None."""

    data: dict[str, Any]
    trace_file: Path | None = None

    def markdown(self, options: Any | None = None) -> str:
        """The profile as Markdown (AITune takes no options yet either: passing any is refused)."""
        if options is not None:
            raise ConfigError("PerformanceProfile.markdown: markdown options are not supported yet")
        return render(self.data)

    def __str__(self) -> str:
        return self.markdown()

    def to_dict(self) -> dict[str, Any]:
        """{"data": ..., "trace_file": its path as a string or None}: what from_dict() reads back."""
        return {"data": self.data, "trace_file": None if self.trace_file is None else str(self.trace_file)}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> "PerformanceProfile":
        trace = value.get("trace_file")
        return cls(data=value["data"], trace_file=None if trace is None else Path(trace))


def profile(obj: Any, input_data: Any, *, inference_function: Callable | None = None, warmup_runs: int = 3,
            measured_runs: int = 10, trace_file: str | Path | None = None) -> PerformanceProfile:
    """Call obj (or inference_function) on one representative input under torch.profiler and report where
    the time goes.

    input_data: a mapping is passed as keyword arguments, a tuple as positional arguments, None as no
    arguments, anything else as the one positional argument. Runs: warmup_runs calls with the profiler idle,
    one call while it warms up, then measured_runs calls, each timed on aitune_ray.measure's clock between two
    synchronizes of every CUDA device in use; all under torch.no_grad(). trace_file: where to write the
    profiler's Chrome trace (its folder is made).

    Regions: every aitune_ray.Module reachable from obj by attribute, and the outermost plain modules beside
    them (aitune_ray.performance.regions), each with its calls, CPU and device time and share in every
    measured run; the rest of a run is its residual. A wrapped module that is still recording records these
    calls as it would any other. Returns a PerformanceProfile (markdown(), to_dict())."""
    for name, value, least in (("warmup_runs", warmup_runs, 0), ("measured_runs", measured_runs, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ConfigError(f"profile: {name} must be an integer of at least {least}, got {value!r}")
    func = obj if inference_function is None else inference_function
    if not callable(func):
        raise NotCallableError(f"profile: {type(func).__name__} is not callable; pass inference_function=...")
    trace = None if trace_file is None else Path(trace_file).expanduser().resolve()
    args, kwargs = normalize_input(input_data)
    regions = find_regions(obj)
    logger.info("profile: %s, %d region(s), %d warm-up and %d measured run(s)", type_name(obj), len(regions),
                warmup_runs, measured_runs)
    capture = run_profiled(lambda: func(*args, **kwargs), regions, warmup_runs, measured_runs, trace)
    if trace is not None and not trace.is_file():
        raise AITuneRayError(f"profile: torch.profiler wrote no trace to {trace}")
    data = {
        "schema_version": SCHEMA_VERSION,
        "created_at": datetime.now(tz=timezone.utc).isoformat(),
        "aitune_version": f"aitune-ray {__version__}",
        "config": {"warmup_runs": warmup_runs, "measured_runs": measured_runs,
                   "uses_inference_function": inference_function is not None},
        "target": {"type": type_name(obj)},
        "input": {"args_count": len(args), "kwargs": sorted(str(key) for key in kwargs)},
        "runs": capture.runs(),
        "profiler": capture.profiler_summary(),
        "regions": capture.regions(),
        "warnings": capture.warnings(),
    }
    walls = [run["timing"]["wall_time_us"] for run in data["runs"]]
    logger.info("profile: %s, wall time per run %.3f ms (median of %d), %d region(s) ran", type_name(obj),
                statistics.median(walls) / 1e3, len(walls), len(data["regions"]))
    for warning in data["warnings"]:
        logger.warning("profile: %s", warning["message"])
    return PerformanceProfile(data=data, trace_file=trace)


def normalize_input(input_data: Any) -> tuple[tuple, dict]:
    """(args, kwargs) for one representative input: mapping -> kwargs, tuple -> args, None -> nothing,
    anything else -> one argument."""
    if input_data is None:
        return (), {}
    if isinstance(input_data, Mapping):
        return (), dict(input_data)
    if isinstance(input_data, tuple):
        return input_data, {}
    return (input_data,), {}
