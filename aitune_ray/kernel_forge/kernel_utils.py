"""KernelUtils: check and time one replacement function on samples, as the forge does (AITune's name).

validate_function compares outputs by relative L2 error with the per-dtype tolerance of every other check
here (measure.correctness), not AITune's atol/rtol; benchmark_function times with the forge's serving-loop
bursts (measure.timing), not triton.testing.do_bench. KernelOptimizer takes kernel_utils= only as the
default KernelUtils(): validation and timing of candidates are one procedure on the workers, which a
subclass cannot replace.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from aitune_ray.errors import ConfigError
from aitune_ray.kernel_forge.function_samples import FunctionSample, device_of, fresh_copy
from aitune_ray.measure.correctness import compare_outputs
from aitune_ray.measure.timing import MeasureConfig

RETURN_MODES = ("min", "max", "mean", "median", "all")


def _samples(samples: Iterable[Any]) -> list[FunctionSample]:
    """FunctionSamples from FunctionSamples, (args, kwargs) pairs or objects with .args and .kwargs."""
    out = []
    for s in samples:
        if isinstance(s, FunctionSample):
            out.append(s)
        elif hasattr(s, "args") and hasattr(s, "kwargs"):
            out.append(FunctionSample(tuple(s.args), dict(s.kwargs)))
        else:
            args, kwargs = s
            out.append(FunctionSample(tuple(args), dict(kwargs)))
    if not out:
        raise ConfigError("KernelUtils needs at least one sample")
    return out


class KernelUtils:
    def validate_function(self, real_function: Callable, new_function: Callable, samples: Iterable[Any],
                          atol: float | None = None, rtol: float | None = None,
                          tolerance: float | None = None) -> list[str]:
        """The differences of new_function from real_function on samples, one message each (empty: valid).
        tolerance: a relative L2 bound for floating outputs (None: the per-dtype default)."""
        if atol is not None or rtol is not None:
            raise ConfigError("outputs are compared by relative L2 error here, not atol/rtol: pass "
                              "tolerance=<relative L2 bound> instead")
        errors = []
        for index, sample in enumerate(_samples(samples)):
            with torch.no_grad():
                real = real_function(*fresh_copy(sample).args, **fresh_copy(sample).kwargs)
                try:
                    args, kwargs = fresh_copy(sample)
                    new = new_function(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - reported as the candidate's error
                    errors.append(f"sample {index}: new function failed: {type(exc).__name__}: {exc}")
                    continue
            report = compare_outputs([(new, real)], tolerance)
            if not report.passed:
                errors.append(report.reason.replace("sample 0", f"sample {index}", 1))
        return errors

    def benchmark_function(self, function: Callable, samples: Iterable[Any], return_mode: str = "mean",
                           warmup: int = 25, repeats: int = 100) -> float | list[float]:
        """Milliseconds per pass over samples: bursts of passes timed between device synchronizes, after
        warmup passes, at most repeats bursts; summarized by return_mode ("all": every burst)."""
        from aitune_ray.kernel_forge.evaluate import time_mix

        if return_mode not in RETURN_MODES:
            raise ConfigError(f"return_mode must be one of {RETURN_MODES}, got {return_mode!r}")
        mix = _samples(samples)
        config = MeasureConfig(warmup_runs=warmup, min_runs=min(10, repeats), max_runs=repeats)
        timing = time_mix(function, mix, device_of(mix), config)
        per_pass = timing.samples_ms()
        if return_mode == "all":
            return per_pass
        if return_mode == "median":
            return timing.median_ms
        return {"min": min, "max": max, "mean": lambda v: sum(v) / len(v)}[return_mode](per_pass)


def check_kernel_utils(kernel_utils: Any) -> None:
    """KernelOptimizer's kernel_utils=: None or the default KernelUtils (see the module docstring)."""
    if kernel_utils is None or type(kernel_utils) is KernelUtils:
        return
    raise ConfigError(f"KernelOptimizer(kernel_utils={type(kernel_utils).__name__}(...)): candidates are validated "
                      "and timed by the forge's one procedure here, which a KernelUtils subclass cannot replace; "
                      "pass tolerance= (relative L2 bound) or measure= (a MeasureConfig) to KernelOptimizer")
