"""The profiled runs under torch.profiler, and what their events say: per-run timings, each region's share of
every run, and the profiler's own key averages.

Steps, as torch.profiler's schedule drives them: warmup_runs calls with the profiler idle, one more call with
it warming up (its buffers are allocated then, not in the first measured call), then measured_runs calls
recorded. Every call runs under torch.no_grad(). A measured call is timed on aitune_ray.measure's clock
between two synchronizes of every CUDA device in use, inside a span named RUN_LABEL.

Attribution reads the CPU events: a region event belongs to the run whose span contains it, and counts only
when no other region's span lies between them (the outer region owns that time already), so the regions of a
run never overlap and the rest of the run is its residual. Times are the profiler's, in microseconds: a
region's CPU time is the host time between its span's ends; device time (CUDA kernels launched under it) is
given only where the profiler saw some.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

import torch

from aitune_ray.errors import AITuneRayError
from aitune_ray.inspecting.finder import synchronize
from aitune_ray.measure.timing import clock_in_use
from aitune_ray.model.recording import recording_session
from aitune_ray.performance.regions import RUN_LABEL, Region, RegionSpans, region_id

logger = logging.getLogger(__name__)

#: Rows kept in each key-averages view (AITune's bound).
KEY_AVERAGES_ROWS = 20


def activities() -> list[torch.profiler.ProfilerActivity]:
    found = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        found.append(torch.profiler.ProfilerActivity.CUDA)
    return found


def run_profiled(call: Callable[[], Any], regions: list[Region], warmup_runs: int, measured_runs: int,
                 trace_file: Path | None) -> "Capture":
    """Run call() warmup_runs + 1 + measured_runs times under the profiler, with the regions' spans."""
    clock = clock_in_use() or time.perf_counter
    kinds = activities()
    options: dict[str, Any] = dict(
        activities=kinds, acc_events=True,
        schedule=torch.profiler.schedule(skip_first=warmup_runs, wait=0, warmup=1, active=measured_runs))
    if trace_file is not None:
        trace_file.parent.mkdir(parents=True, exist_ok=True)
        options["on_trace_ready"] = lambda prof: prof.export_chrome_trace(str(trace_file))
    wall_us: list[float] = []
    with RegionSpans(regions) as spans, recording_session() as reached:
        with torch.profiler.profile(**options) as prof, torch.no_grad():
            for step in range(warmup_runs + 1 + measured_runs):
                if step <= warmup_runs:
                    call()
                    synchronize()
                else:
                    synchronize()
                    start = clock()
                    with torch.profiler.record_function(RUN_LABEL):
                        call()
                    synchronize()
                    wall_us.append((clock() - start) * 1e6)
                prof.step()
        events = list(prof.events() or [])
        averages = list(prof.key_averages() or [])
    found = {id(region.module) for region in regions}
    unattributed = [getattr(m, "name", type(m).__name__) for m in reached if id(m) not in found]
    return Capture(wall_us, events, averages, [kind.name for kind in kinds], spans.labels, unattributed)


class Capture:
    """The measured runs' wall times, the profiler's events and key averages, and the attribution they give."""

    def __init__(self, wall_us: list[float], events: list, averages: list, activity_names: list[str],
                 labels: dict[str, Region], unattributed: list[str]):
        self.wall_us, self.averages, self.activity_names = wall_us, averages, activity_names
        self.labels, self.unattributed = labels, unattributed
        cpu_events = [e for e in events if _on_cpu(e)]
        self.markers = [e for e in cpu_events if e.name == RUN_LABEL]
        if len(self.markers) != len(wall_us):
            raise AITuneRayError(f"profile: torch.profiler recorded {len(self.markers)} run spans for "
                                 f"{len(wall_us)} measured runs")
        self.observed: list[Region] = []                                  # in the order first seen
        self.per_run: list[dict[str, dict[str, Any]]] = [{} for _ in wall_us]   # run -> region id -> sums
        self.outside_runs = 0
        self._attribute(cpu_events)

    def _attribute(self, cpu_events: list) -> None:
        run_of = {id(marker): index for index, marker in enumerate(self.markers)}
        seen: set[str] = set()
        for event in cpu_events:
            region = self.labels.get(event.name)
            if region is None:
                continue
            run, nested = _owner(event, run_of, self.labels)
            if nested:
                continue
            if run is None:
                self.outside_runs += 1
                continue
            if region.label not in seen:
                seen.add(region.label)
                self.observed.append(region)
            rid = region_id(region.kind, region.name)
            sums = self.per_run[run].setdefault(rid, {"region_id": rid, "calls": 0, "cpu_time_us": 0.0,
                                                      "device_time_us": None})
            sums["calls"] += 1
            sums["cpu_time_us"] += _number(event, "cpu_time_total")
            device = _device_us(event)
            if device is not None:
                sums["device_time_us"] = (sums["device_time_us"] or 0.0) + device

    # ----- the report's parts --------------------------------------------------------------------
    def runs(self) -> list[dict[str, Any]]:
        out = []
        for index, wall in enumerate(self.wall_us):
            marker = self.markers[index]
            timing = {"wall_time_us": wall, "cpu_time_us": _number(marker, "cpu_time_total")}
            device = _device_us(marker)
            if device is not None:
                timing["device_time_us"] = device
            regions = [_with_fractions(sums, timing) for sums in self.per_run[index].values()]
            out.append({"run_index": index, "timing": timing, "regions": regions,
                        "residual": _residual(timing, regions)})
        return out

    def regions(self) -> list[dict[str, Any]]:
        out = []
        for region in self.observed:
            row = {"id": region_id(region.kind, region.name), "name": region.name, "kind": region.kind,
                   "module_type": region.module_type}
            if region.state() is not None:
                row["wrapper_state"] = region.state()
            out.append(row)
        return out

    def profiler_summary(self) -> dict[str, Any]:
        views = {"cpu_time_total": self._view("cpu_time_total")}
        if any(_number(e, "device_time_total") > 0 for e in self.averages):
            views["device_time_total"] = self._view("device_time_total")
        return {"activities": self.activity_names, "key_averages": views}

    def warnings(self) -> list[dict[str, str]]:
        out = []
        if self.unattributed:
            out.append({"code": "UNATTRIBUTED_MODULE", "source": "core",
                        "message": (f"{len(self.unattributed)} aitune_ray.Module(s) ran but are not reachable "
                                    f"from the profiled object by attribute: {', '.join(self.unattributed)}; "
                                    "their time is in the enclosing region or the residual")})
        if self.outside_runs:
            out.append({"code": "UNMAPPED_REGION_EVENTS", "source": "core",
                        "message": f"{self.outside_runs} region event(s) lay outside every measured run"})
        return out

    def _view(self, sort_by: str) -> dict[str, Any]:
        rows = sorted(self.averages, key=lambda e: _number(e, sort_by), reverse=True)[:KEY_AVERAGES_ROWS]
        return {"sort_by": sort_by, "row_limit": KEY_AVERAGES_ROWS, "events": [_average_row(e) for e in rows]}


def _owner(event: Any, run_of: dict[int, int], labels: dict[str, Region]) -> tuple[int | None, bool]:
    """(the measured run whose span holds the event or None, whether another region's span lies between)."""
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        if id(parent) in run_of:
            return run_of[id(parent)], False
        if parent.name in labels:
            return None, True
        parent = getattr(parent, "cpu_parent", None)
    return None, False


def _with_fractions(sums: dict[str, Any], timing: dict[str, Any]) -> dict[str, Any]:
    row = {"region_id": sums["region_id"], "calls": sums["calls"], "cpu_time_us": sums["cpu_time_us"]}
    if timing["cpu_time_us"] > 0:
        row["cpu_time_fraction"] = sums["cpu_time_us"] / timing["cpu_time_us"]
    if sums["device_time_us"] is not None:
        row["device_time_us"] = sums["device_time_us"]
        if timing.get("device_time_us"):
            row["device_time_fraction"] = sums["device_time_us"] / timing["device_time_us"]
    return row


def _residual(timing: dict[str, Any], regions: list[dict[str, Any]]) -> dict[str, Any]:
    """The part of the run outside every region, per time domain (never below zero)."""
    cpu = max(0.0, timing["cpu_time_us"] - sum(r["cpu_time_us"] for r in regions))
    out = {"cpu_time_us": cpu, "cpu_time_fraction": cpu / timing["cpu_time_us"] if timing["cpu_time_us"] > 0 else 0.0}
    if timing.get("device_time_us"):
        device = max(0.0, timing["device_time_us"] - sum(r.get("device_time_us", 0.0) for r in regions))
        out["device_time_us"], out["device_time_fraction"] = device, device / timing["device_time_us"]
    return out


def _average_row(event: Any) -> dict[str, Any]:
    row = {"key": str(getattr(event, "key", "")), "device_type": _device_type(event),
           "count": int(getattr(event, "count", 0) or 0),
           "self_cpu_time_total_us": _number(event, "self_cpu_time_total"),
           "cpu_time_total_us": _number(event, "cpu_time_total")}
    for name in ("self_device_time_total", "device_time_total"):
        if _number(event, name) > 0:
            row[f"{name}_us"] = _number(event, name)
    return row


def _number(event: Any, name: str) -> float:
    return float(getattr(event, name, 0.0) or 0.0)


def _device_us(event: Any) -> float | None:
    value = _number(event, "device_time_total")
    return value if value > 0 else None


def _device_type(event: Any) -> str:
    kind = getattr(event, "device_type", None)
    return "unknown" if kind is None else str(kind).removeprefix("DeviceType.")


def _on_cpu(event: Any) -> bool:
    kind = getattr(event, "device_type", None)
    return kind is None or str(kind) == "DeviceType.CPU"
