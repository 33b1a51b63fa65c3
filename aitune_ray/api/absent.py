"""AITune names with no counterpart here: each fails when used, saying what to write instead.

They exist so that AITune code that imports them fails at the line that uses them, with the way to do the
same thing here, rather than with an AttributeError or, worse, a look-alike that does something else.
"""

from __future__ import annotations

from typing import Any

from aitune_ray.errors import ConfigError

AHEAD_OF_TIME = ("tuning here is ahead of time: wrap the modules with aitune_ray.Module(...), call "
                 "aitune_ray.tune(func, dataset) on real inputs, then aitune_ray.save / aitune_ray.load")
REPORT = ("tune() returns a TuningReport: every candidate's timings at every recorded batch size, its "
          "correctness error and the decision (report.markdown(), report.to_dict())")
NO_CONFIG = ("there is no global configuration: options are arguments of the strategies, the backend configs, "
             "tune() and the executor; nothing is cached between runs")

INSTEAD = {
    "snapshot_tuning_data": REPORT,
    "patch_for_jit_tuning": AHEAD_OF_TIME,
    "PatchedModule": AHEAD_OF_TIME,
    "jit_config": NO_CONFIG,
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


def _class(name: str) -> type:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise refusal(name)

    return type(name, (), {"__init__": __init__, "__doc__": f"Not available here: {INSTEAD[name]}."})


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
patch_for_jit_tuning = _function("patch_for_jit_tuning")
aitune_cache_dir = _function("aitune_cache_dir")
PatchedModule = _class("PatchedModule")
config = _NoConfig("config")
jit_config = _NoConfig("jit_config")
