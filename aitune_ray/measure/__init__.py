"""Timing, stop rules and correctness comparison."""

from aitune_ray.measure.correctness import CorrectnessReport, compare_outputs, default_tolerance
from aitune_ray.measure.request import ServingContext, TimingRequest, TimingSession
from aitune_ray.measure.timing import MeasureConfig, Timing

__all__ = ["CorrectnessReport", "compare_outputs", "default_tolerance", "MeasureConfig", "Timing",
           "ServingContext", "TimingRequest", "TimingSession"]
