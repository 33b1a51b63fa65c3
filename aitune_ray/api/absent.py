"""AITune names with no counterpart here: each fails when used, saying what to write instead.

They exist so that AITune code that imports them fails at the line that uses them, with the way to do the
same thing here, rather than with an AttributeError or, worse, a look-alike that does something else.
"""

from __future__ import annotations

from typing import Any

from aitune_ray.errors import ConfigError

REPORT = ("tune() returns a TuningReport: every candidate's timings at every recorded batch size, its "
          "correctness error and the decision (report.markdown(), report.to_dict())")
NO_CONFIG = ("there is no global configuration: options are arguments of the strategies, the backend configs, "
             "tune() and the executor (the JIT mode has its own: aitune_ray.jit_config)")

INSTEAD = {
    "snapshot_tuning_data": REPORT,
    "config": NO_CONFIG,
    "aitune_cache_dir": NO_CONFIG,
}


def refusal(name: str) -> ConfigError:
    return ConfigError(f"AITune's {name} has no counterpart in aitune_ray: {INSTEAD[name]}")


def _function(name: str):
    def refused(*args: Any, **kwargs: Any):
        raise refusal(name)

    refused.__name__ = refused.__qualname__ = name
    refused.__doc__ = f"Not available here: {INSTEAD[name]}."
    return refused


class _NoConfig:
    """Stands where AITune has a global config object: reading or setting an option fails, saying why."""

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise refusal(self._name)

    def __setattr__(self, attr: str, value: Any) -> None:
        raise refusal(self._name)

    def __repr__(self) -> str:
        return f"<AITune's {self._name}: not available in aitune_ray>"


snapshot_tuning_data = _function("snapshot_tuning_data")
aitune_cache_dir = _function("aitune_cache_dir")
config = _NoConfig("config")
