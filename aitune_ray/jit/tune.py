"""deferred(): in JITMode.TUNE_DEFERRED, the safe point after which recorded modules are tuned; wait(): until
every module being tuned has its verdict."""

from __future__ import annotations

from aitune_ray.errors import ConfigError
from aitune_ray.jit.config import JITMode, config
from aitune_ray.jit.patcher import Patcher


def deferred() -> None:
    """Start tuning the modules recorded so far (they go on running eagerly until their verdicts)."""
    if config.mode is not JITMode.TUNE_DEFERRED:
        raise ConfigError(f"tune.deferred() needs JITMode.TUNE_DEFERRED; the mode is {config.mode.value}")
    Patcher.enable_tune_deferred()


def wait(timeout: float | None = None) -> bool:
    """Block until every module submitted for tuning has its verdict (taken at its next call); False on
    timeout. The program never needs it: calls run eagerly meanwhile."""
    return Patcher.tuner is None or Patcher.tuner.wait(timeout)
