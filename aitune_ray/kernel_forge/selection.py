"""The one kernel-choice rule: which candidate of a function is kept, from its benchmark records.

Pure: no timing, no device, no Ray. The timings it needs come through two callables of the runner that
made the records (in this process or on Ray actors), so every executor chooses the same way:

1. each valid candidate's speedup is taken against the original function timed on its own GPU
   (``originals``: (node, gpu) -> the original's record); a candidate whose GPU has no original is
   compared with another GPU's and must be re-measured;
2. when the best wins by less than ``margin``, or candidates within ``margin`` of it come from different
   GPUs (or lack their own original), the original and those finalists are re-measured interleaved
   (A B A B ...) on one device (``remeasure(finalists)``), and the choice is made among the finalists that
   were re-measured, on those numbers;
3. the fastest candidate is kept only when it beats the original.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from aitune_ray.kernel_forge.records import ProviderBenchmark

logger = logging.getLogger(__name__)

#: A provider winning by less than this fraction is re-measured interleaved on one GPU before it is kept.
REMEASURE_MARGIN = 0.05


def finalists_to_remeasure(valid: list[ProviderBenchmark], margin: float = REMEASURE_MARGIN,
                           unmatched: Iterable[int] = ()) -> list[ProviderBenchmark]:
    """The candidates to re-measure interleaved on one GPU before choosing, best first; [] when the raw
    numbers decide. valid: records with speedups against the original on their own GPU. The best is
    re-measured when its win is under margin (with every candidate within margin of it); candidates within
    margin of the best are re-measured together when they came from different GPUs, or when one of them
    (an id() in unmatched) had no original timed on its own GPU."""
    ranked = sorted((r for r in valid if r.speedup is not None), key=lambda r: r.speedup, reverse=True)
    if not ranked or ranked[0].speedup <= 1.0:
        return []
    best = ranked[0]
    close = [r for r in ranked if r.speedup * (1.0 + margin) >= best.speedup]
    unmatched = set(unmatched)
    if best.speedup < 1.0 + margin or len({(r.node, r.gpu) for r in close}) > 1 \
            or any(id(r) in unmatched for r in close):
        return close
    return []


def set_speedups(valid: list[ProviderBenchmark], originals: dict[tuple, ProviderBenchmark]) -> set[int]:
    """Each record's speedup against the original of its own (node, gpu); returns the id()s of records
    that had none there (compared with another GPU's original instead)."""
    unmatched = set()
    for record in valid:
        base = originals.get((record.node, record.gpu))
        if base is None:   # its worker was replaced by one on another GPU: compare after a re-measure
            base = next(iter(originals.values()))
            unmatched.add(id(record))
        record.speedup = base.median_ms / max(record.median_ms, 1e-9)
    return unmatched


def apply_interleaved(finalists: list[ProviderBenchmark], out: dict) -> None:
    """Take an interleaved re-measure (the forge's "interleaved" task output: the original's and each
    finalist's, by index, timings on one GPU) into the finalists' records."""
    base = out["original"]["median_ms"]
    for index, record in enumerate(finalists):
        timing = out["candidates"].get(str(index))
        if timing is None:
            logger.warning("%s was not re-measured: %s", record.description, out["errors"].get(str(index)))
            continue
        speedup = base / max(timing["median_ms"], 1e-9)
        record.remeasured = {"gpu": out["gpu"], "node": out["node"], "rounds": out["rounds"],
                             "median_ms": timing["median_ms"], "cv": timing["cv"], "original_ms": base,
                             "speedup": speedup, "raw_speedup": record.speedup}
        record.speedup = speedup


def select_best(valid: list, function: str):
    """The fastest valid candidate, marked selected, if it beats the original function; else None."""
    best = max(valid, key=lambda r: r.speedup or 0.0)
    if (best.speedup or 0.0) <= 1.0:
        logger.info("no candidate beats the original %s (best: %s, %.2fx)", function, best.description,
                    best.speedup or 0.0)
        return None
    best.selected = True
    return best


def choose(function: str, records: list[ProviderBenchmark], originals: dict[tuple, ProviderBenchmark],
           remeasure: Callable[[list[ProviderBenchmark]], None] | None,
           margin: float = REMEASURE_MARGIN) -> ProviderBenchmark | None:
    """The record of the candidate to keep for function, or None (the original stays). remeasure: fills
    the finalists' remeasured numbers (apply_interleaved); None: the raw numbers always decide."""
    valid = [r for r in records if r.ok and r.median_ms is not None]
    if not valid:
        return None
    if not originals:
        logger.warning("the original %s could not be timed on any worker", function)
        return None
    unmatched = set_speedups(valid, originals)
    finalists = finalists_to_remeasure(valid, margin, unmatched) if remeasure is not None else []
    if finalists:
        remeasure(finalists)
        valid = [r for r in finalists if r.remeasured is not None]
        if not valid:
            logger.warning("nothing is kept for %s: its finalists could not be re-measured on one GPU", function)
            return None
    return select_best(valid, function)
