"""The units of work of the kernel search, as plain-data functions an executor can run anywhere.

benchmark_provider: one (function, provider) pair on the function's recorded samples: prepare,
validate against the original function on every distinct sample, time the GCD-reduced call mix.
run_generator: one generator for one function, under a timeout. Inputs are a function name, a
provider's or generator's to_dict() (or the live object, in-process), and the samples; outputs are
records that never raise for the candidate's own failures.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable

import torch
import torch.nn.functional as F

from aitune_ray.runtime.device import gpu_identity
from aitune_ray.records.failures import outcome
from aitune_ray.kernel_forge.function_samples import (
    FunctionData, FunctionSample, as_function_data, benchmark_mix, device_of, fresh_copy)
from aitune_ray.kernel_forge.kernel_provider.kernel_generator import (
    KernelGenerationResult, KernelGenerator, kernel_generator_from_dict)
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import KernelProvider, kernel_provider_from_dict
from aitune_ray.kernel_forge.records import (
    ERROR, OK, ORIGINAL, REJECTED, UNSUPPORTED, GenerationOutcome, ProviderBenchmark)
from aitune_ray.measure.correctness import CorrectnessReport, compare_outputs
from aitune_ray.measure.request import TimingRequest
from aitune_ray.measure.timing import MeasureConfig, Timing
from aitune_ray.model.samples import tensors_of

logger = logging.getLogger(__name__)

#: Timing of one candidate: a pass over the call mix is one run.
KERNEL_MEASURE = MeasureConfig(warmup_runs=3, min_runs=10, max_runs=100, max_cv=0.05, max_seconds=1.0)


def reference_outputs(function: str, samples: list[FunctionSample]) -> list:
    """The original function's outputs on each distinct sample (inputs copied, gradients off)."""
    original = getattr(F, function)
    with torch.no_grad():
        return [original(*s.args, **s.kwargs) for s in map(fresh_copy, samples)]


def _output_dtype(reference: Any) -> torch.dtype | None:
    for t in tensors_of(reference):
        if t.dtype.is_floating_point:
            return t.dtype
    return None


def validate(candidate: Callable, samples: list[FunctionSample], references: list,
             tolerance_for: Callable[[torch.dtype], float]) -> CorrectnessReport:
    """Compare candidate with the references on every sample; a relative L2 tolerance by output dtype."""
    worst, worst_tol, where = 0.0, 0.0, ""
    for index, (sample, reference) in enumerate(zip(samples, references)):
        args, kwargs = fresh_copy(sample)
        with torch.no_grad():
            output = candidate(*args, **kwargs)
        dtype = _output_dtype(reference)
        tolerance = tolerance_for(dtype) if dtype is not None else None
        report = compare_outputs([(output, reference)], tolerance)
        if not report.passed:
            reason = report.reason.replace("sample 0", f"sample {index}", 1)
            return CorrectnessReport(False, report.max_error, report.tolerance, index + 1, reason)
        if report.max_error >= worst:
            worst, worst_tol, where = report.max_error, report.tolerance, f"worst at sample {index}"
    return CorrectnessReport(True, worst, worst_tol, len(samples), where)


def time_mix(call: Callable, mix: list[FunctionSample], device: torch.device,
             config: MeasureConfig | None = None) -> Timing:
    """Time one pass over the call mix (inputs copied once per distinct sample, then reused)."""
    copies: dict[int, FunctionSample] = {}
    calls = []
    for sample in mix:
        if id(sample) not in copies:
            copies[id(sample)] = fresh_copy(sample)
        calls.append(copies[id(sample)])

    def one_pass():
        for args, kwargs in calls:
            call(*args, **kwargs)

    request = TimingRequest.alone("kernel", device, measure=config or KERNEL_MEASURE)
    return request.run_groups({0: {"mix": one_pass}}, device, {0: len(calls)}).timings["mix"][0]


def _new_record(function: str, description: str, source: str, mix: list, device: torch.device) -> ProviderBenchmark:
    return ProviderBenchmark(function=function, description=description, status=ERROR, source=source,
                             mix_calls=len(mix), device=str(device), gpu=gpu_identity(device))


def _fill_timing(record: ProviderBenchmark, timing: Timing) -> None:
    record.median_ms, record.cv, record.runs = timing.median_ms, timing.cv, timing.runs


def benchmark_provider(function: str, provider: dict | KernelProvider, samples: FunctionData | list, *,
                       references: list | None = None, tolerance: float | None = None,
                       measure_config: MeasureConfig | None = None, source: str = "provider") -> ProviderBenchmark:
    """Prepare, validate and time one provider of function. Never raises for the provider's failures.

    provider: its to_dict() (a fresh provider is made from it) or a live provider (used as it is).
    samples: the function's FunctionData ((count, sample) pairs) or plain samples.
    tolerance: one relative L2 bound for every floating output; None: the provider's own by dtype.
    """
    started = time.perf_counter()
    data = as_function_data(samples)
    unique, mix = [s for _, s in data], benchmark_mix(data)
    device = device_of(unique)
    record = _new_record(function, str((provider or {}).get("type", "?")) if isinstance(provider, dict) else "?",
                         source, mix, device)
    stage = "creation"
    try:
        live = provider if isinstance(provider, KernelProvider) else kernel_provider_from_dict(provider)
        record.description = live.name
        if live.supported_function != function:
            raise ValueError(f"{live.name} replaces {live.supported_function}, not {function}")
        stage = "preparation"
        with torch.no_grad():
            supported = live.prepare(unique)
        record.provider = live.to_dict()
        if not supported:
            record.status, record.error = UNSUPPORTED, live.reason or "not every sample is supported"
            return record
        stage = "validation"
        refs = references if references is not None else reference_outputs(function, unique)
        tolerance_for = (lambda dtype: tolerance) if tolerance is not None else live.tolerance_for
        report = validate(live, unique, refs, tolerance_for)
        record.max_error, record.tolerance, record.samples_compared = report.max_error, report.tolerance, \
            report.samples_compared
        if not report.passed:
            record.status, record.error = REJECTED, report.reason
            return record
        stage = "timing"
        _fill_timing(record, time_mix(live, mix, device, measure_config))
        record.status, record.live = OK, live
        return record
    except Exception as exc:  # noqa: BLE001 - a provider may raise anything; it is this candidate's result
        failure = outcome(stage, exc=exc)
        record.status, record.error = failure.status, failure.error
        logger.debug("%s", traceback.format_exc())
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return record
    finally:
        record.seconds = time.perf_counter() - started
        if record.max_error is not None and not math.isfinite(record.max_error):
            record.max_error = None  # not comparable (shape, dtype, NaN); the error says why


def benchmark_original(function: str, samples: FunctionData | list, *,
                       measure_config: MeasureConfig | None = None) -> ProviderBenchmark:
    """The original function timed on the same path as the candidates."""
    started = time.perf_counter()
    data = as_function_data(samples)
    unique, mix = [s for _, s in data], benchmark_mix(data)
    device = device_of(unique)
    record = _new_record(function, f"{ORIGINAL} F.{function}", ORIGINAL, mix, device)
    try:
        _fill_timing(record, time_mix(getattr(F, function), mix, device, measure_config))
        record.status, record.max_error, record.speedup = OK, 0.0, 1.0
    except Exception as exc:  # noqa: BLE001
        failure = outcome("timing", exc=exc)
        record.status, record.error = failure.status, failure.error
    record.seconds = time.perf_counter() - started
    return record


def outcome_from_result(function: str, generator: str, result: Any, seconds: float) -> GenerationOutcome:
    """Check what a generator's future returned and turn it into a record."""
    record = GenerationOutcome(function=function, generator=generator, status=ERROR, seconds=seconds)
    if not isinstance(result, KernelGenerationResult):
        record.error = f"the future returned {type(result).__name__}, not a KernelGenerationResult"
        return record
    record.description = result.description
    if result.function != function:
        record.error = f"generated for {result.function}, not {function}"
    elif result.provider is None:
        record.error = result.error or "no provider"
    else:
        try:
            record.provider, record.live, record.status = result.provider.to_dict(), result.provider, OK
        except Exception as exc:  # noqa: BLE001
            failure = outcome("serializing the generated provider", exc=exc)
            record.status, record.error = failure.status, failure.error
    return record


def run_generator(function: str, generator: dict | KernelGenerator, samples: FunctionData | list,
                  timeout: float | None = None) -> GenerationOutcome:
    """Run one generator for one function and wait at most timeout seconds. Never raises."""
    started = time.perf_counter()
    unique = [s for _, s in as_function_data(samples)]
    name = generator.get("type", "?") if isinstance(generator, dict) else generator.name
    try:
        live = generator if isinstance(generator, KernelGenerator) else kernel_generator_from_dict(generator)
        name = live.name
        if not live.prepare(function, unique):
            return GenerationOutcome(function, name, UNSUPPORTED, error="the generator does not support these samples",
                                     seconds=time.perf_counter() - started)
        future = live.submit(function, unique)
    except Exception as exc:  # noqa: BLE001
        failure = outcome("submission", exc=exc)
        return GenerationOutcome(function, name, failure.status, error=failure.error,
                                 seconds=time.perf_counter() - started)
    try:
        result = future.result(timeout=timeout)
    except FutureTimeout:
        future.cancel()
        failure = outcome("generation", timed_out=True, limit_s=timeout)
        return GenerationOutcome(function, name, failure.status, error=failure.error,
                                 seconds=time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001
        failure = outcome("generation", exc=exc)
        return GenerationOutcome(function, name, failure.status, error=failure.error,
                                 seconds=time.perf_counter() - started)
    return outcome_from_result(function, name, result, time.perf_counter() - started)
