"""The kernel forge's tasks on a worker: provider benchmarks, generator runs, the original function's
timing and the confirm sessions of its finalists ("interleaved"), on one function's recorded samples.

A function's samples are named by a token and fetched once (fetch(): CPU FunctionData; on a Ray actor
from the object store), moved to the worker's device, and the original function's reference outputs are
computed there, so candidates are checked on the device they run on. Every record returned is a plain
dict naming this worker's GPU and node. No Ray here.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import torch
import torch.nn.functional as F

from aitune_ray.kernel_forge.evaluate import benchmark_original, benchmark_provider, reference_outputs, run_generator
from aitune_ray.kernel_forge.function_samples import FunctionData, FunctionSample, fresh_copy
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import kernel_provider_from_dict
from aitune_ray.measure.request import TimingRequest
from aitune_ray.measure.timing import MeasureConfig
from aitune_ray.model.samples import move

logger = logging.getLogger(__name__)

CACHED_FUNCTIONS = 8
# The tasks that time the GPU: at a GPU that workers share they take a timing's turn (aitune_ray.measure.turns).
# A generator's run ("generate") is not one: it may run for hours beside everything, under its own timeout.
TIMED_TASKS = frozenset({"benchmark", "original", "interleaved"})


class ForgeTasks:
    """identity: the worker's identity (its "gpu" and "node" stamp every record)."""

    def __init__(self, identity: dict):
        self.identity = identity
        self._cache: dict[Any, list] = {}   # box token -> [data on device, references or None]

    def clear(self) -> None:
        self._cache.clear()

    def _entry(self, box: tuple, device: torch.device) -> list:
        name, fetch = box
        token = (name, str(device))
        entry = self._cache.get(token)
        if entry is None:
            data = fetch()
            moved = [(int(count), FunctionSample(*move((tuple(s[0]), dict(s[1])), device))) for count, s in data]
            if len(self._cache) >= CACHED_FUNCTIONS:
                self._cache.clear()
            entry = self._cache[token] = [moved, None]
        return entry

    def _data(self, box: tuple, device: torch.device, function: str | None = None) -> tuple[FunctionData, list]:
        """box: (token, fetch) of one function's samples."""
        entry = self._entry(box, device)
        if function is not None and entry[1] is None:
            entry[1] = reference_outputs(function, [s for _, s in entry[0]])
        return entry[0], entry[1]

    def _stamp(self, record) -> dict:
        record.gpu = self.identity.get("gpu") or record.gpu
        record.node = self.identity.get("node") or record.node
        return record.to_dict()

    # ----- work --------------------------------------------------------------------------------
    def benchmark(self, box: tuple, device: torch.device, function: str, provider: dict, tolerance: float | None,
                  measure: dict, source: str) -> dict:
        data, references = self._data(box, device, function)
        record = benchmark_provider(function, provider, data, references=references, tolerance=tolerance,
                                    measure_config=MeasureConfig.from_dict(measure), source=source)
        logger.info("forge: %s for %s on %s: %s %s", record.description, function, self.identity.get("gpu"),
                    record.status, record.error)
        return self._stamp(record)

    def generate(self, box: tuple, device: torch.device, function: str, generator: dict,
                 timeout: float | None = None) -> dict:
        data, _ = self._data(box, device)
        outcome = run_generator(function, generator, data, timeout=timeout)
        logger.info("forge: %s for %s: %s %s", outcome.generator, function, outcome.status, outcome.error)
        return outcome.to_dict()

    def original(self, box: tuple, device: torch.device, function: str, measure: dict) -> dict:
        data, _ = self._data(box, device)
        return self._stamp(benchmark_original(function, data, measure_config=MeasureConfig.from_dict(measure)))

    def interleaved(self, box: tuple, device: torch.device, function: str, providers: list[dict],
                    rounds: int) -> dict:
        """The confirm session of a function's finalists (aitune_ray.kernel_forge.selection): the original, an
        A/A control (the original again, timed as a callable of its own) and each provider (its prepared to_dict()),
        in paired shuffled rounds at every recorded sample of the function. Returns {"original", "control",
        "candidates" (index -> timings)}: timings by sample index (Timing dicts); "mix": sample index -> calls
        (the recorded counts over their GCD); "errors", "rounds", "gpu", "node"; "failed" where none ran."""
        data, _ = self._data(box, device)
        entries = [(count, sample) for count, sample in data if count > 0]
        divisor = 0
        for count, _ in entries:
            divisor = math.gcd(divisor, count)
        original = getattr(F, function)
        # the A/A control: the original again, as a callable of its own, timed like every other one
        calls: dict[str, Any] = {"original": original, "control": original}
        errors: dict[str, str] = {}
        for index, spec in enumerate(providers):
            try:
                live = kernel_provider_from_dict(spec)
                if not live.is_ready and not live.prepare([s for _, s in data]):
                    raise RuntimeError(live.reason or "not every sample is supported")
                calls[str(index)] = live
            except Exception as exc:  # noqa: BLE001 - one candidate cannot stop the others' session
                errors[str(index)] = f"{type(exc).__name__}: {exc}"
        where = {"errors": errors, "rounds": rounds, "gpu": self.identity.get("gpu", ""),
                 "node": self.identity.get("node", "")}
        groups = {}
        for shape, (_, sample) in enumerate(entries):
            args, kwargs = fresh_copy(sample)
            groups[shape] = {name: functools.partial(call, *args, **kwargs) for name, call in calls.items()}
        try:
            timed = TimingRequest.paired("kernel-confirm", device, rounds=rounds).run_groups(groups, device).timings
        except Exception as exc:  # noqa: BLE001 - a failed session keeps the original
            logger.exception("forge: the confirm session of %s failed", function)
            return {**where, "failed": f"{type(exc).__name__}: {exc}"}

        def plain(per):
            return {shape: t.to_dict() for shape, t in per.items()}

        logger.info("forge: confirm session of %s and %d candidate(s) on %s", function, len(calls) - 2,
                    self.identity.get("gpu"))
        return {**where, "original": plain(timed.pop("original")), "control": plain(timed.pop("control")),
                "candidates": {k: plain(t) for k, t in timed.items()},
                "mix": {shape: count // divisor for shape, (count, _) in enumerate(entries)}}
