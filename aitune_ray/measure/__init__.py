"""Timing, stop rules and correctness comparison."""

from aitune_ray.measure.correctness import CorrectnessReport, compare_outputs, default_tolerance
from aitune_ray.measure.timing import MeasureConfig, Timing, measure, measure_interleaved, profile_samples

__all__ = ["CorrectnessReport", "compare_outputs", "default_tolerance", "MeasureConfig", "Timing",
           "measure", "measure_interleaved", "profile_samples"]
