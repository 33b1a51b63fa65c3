"""PerformanceValidationMode: how the comparison with eager takes part in the choice (AITune's names).

ENABLED: a candidate must beat eager by min_speedup_ratio to be chosen. DIAGNOSTIC: the comparison is
measured and reported, but does not take part in the choice. DISABLED: not used either. Eager is timed in
every mode here (its outputs and timings are the reference of the correctness check and the report), so
DIAGNOSTIC and DISABLED choose alike and differ in what the report says.
"""

from __future__ import annotations

import enum

from aitune_ray.errors import ConfigError


class PerformanceValidationMode(str, enum.Enum):
    ENABLED = "enabled"
    DIAGNOSTIC = "diagnostic"
    DISABLED = "disabled"


def validation_mode(value) -> PerformanceValidationMode:
    """value (a mode, its name as a string in any case, or a bool: True is ENABLED) as a mode; anything
    else is a ConfigError, so that a string is never read as a truthy flag."""
    if isinstance(value, bool):
        return PerformanceValidationMode.ENABLED if value else PerformanceValidationMode.DISABLED
    if isinstance(value, PerformanceValidationMode):
        return value
    if isinstance(value, str):
        try:
            return PerformanceValidationMode(value.lower())
        except ValueError:
            pass
    names = ", ".join(repr(m.value) for m in PerformanceValidationMode)
    raise ConfigError(f"performance validation mode must be a PerformanceValidationMode, one of {names}, or a "
                      f"bool; got {value!r}")


DEFAULT_MIN_SPEEDUP_RATIO = 0.01   # AITune's min_speedup_threshold_percent=1.0


def speedup_ratio(ratio: float | None, percent: float | None) -> float:
    """The one minimum speedup, from min_speedup_ratio or AITune's min_speedup_threshold_percent."""
    if ratio is not None and percent is not None and abs(ratio * 100.0 - percent) > 1e-9:
        raise ConfigError(f"min_speedup_ratio={ratio} and min_speedup_threshold_percent={percent} disagree: "
                          "give one of them")
    for name, value in (("min_speedup_ratio", ratio), ("min_speedup_threshold_percent", percent)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ConfigError(f"{name} must be a number, got {value!r}")
    if percent is not None:
        return float(percent) / 100.0
    return DEFAULT_MIN_SPEEDUP_RATIO if ratio is None else ratio
