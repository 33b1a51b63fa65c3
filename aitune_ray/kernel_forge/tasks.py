"""The kernel forge's tasks on a worker: provider benchmarks, generator runs, the original function's
timing and interleaved re-measures, on one function's recorded samples.

A function's samples are named by a token and fetched once (fetch(): CPU FunctionData; on a Ray actor
from the object store), moved to the worker's device, and the original function's reference outputs are
computed there, so candidates are checked on the device they run on. Every record returned is a plain
dict naming this worker's GPU and node. No Ray here.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from aitune_ray.kernel_forge.evaluate import benchmark_original, benchmark_provider, reference_outputs, run_generator
from aitune_ray.kernel_forge.function_samples import FunctionData, FunctionSample, benchmark_mix, fresh_copy
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import kernel_provider_from_dict
from aitune_ray.measure.timing import MeasureConfig, measure_interleaved
from aitune_ray.samples import move

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
        """The original and each provider (its prepared to_dict()) timed in turn, A B C A B C ..., over the
        function's call mix. Returns the original's and each provider's (by index) Timing dicts."""
        data, _ = self._data(box, device)
        mix = benchmark_mix(data)
        copies = {id(s): fresh_copy(s) for s in mix}
        calls = [copies[id(s)] for s in mix]

        def one_pass(fn):
            return lambda: [fn(*args, **kwargs) for args, kwargs in calls]

        fns = {"original": one_pass(getattr(F, function))}
        errors: dict[str, str] = {}
        for index, spec in enumerate(providers):
            try:
                live = kernel_provider_from_dict(spec)
                if not live.is_ready and not live.prepare([s for _, s in data]):
                    raise RuntimeError(live.reason or "not every sample is supported")
                fns[str(index)] = one_pass(live)
            except Exception as exc:  # noqa: BLE001 - one candidate cannot stop the others' re-measure
                errors[str(index)] = f"{type(exc).__name__}: {exc}"
        timings = measure_interleaved(fns, device, len(calls), rounds=rounds)
        original = timings.pop("original")
        logger.info("forge: re-measured %s and %d candidate(s) interleaved on %s", function, len(timings),
                    self.identity.get("gpu"))
        return {"original": original.to_dict(), "candidates": {k: t.to_dict() for k, t in timings.items()},
                "errors": errors, "rounds": rounds, "gpu": self.identity.get("gpu", ""),
                "node": self.identity.get("node", "")}
