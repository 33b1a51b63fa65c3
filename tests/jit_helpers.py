"""What the tests of just-in-time tuning share: JIT tuning set up from a clean state on one backend and reset
afterwards, and AITune's JIT examples (examples/jit/) run as a fresh program would run them."""

from __future__ import annotations

import contextlib
import runpy
import sys
from pathlib import Path

import aitune_ray as ait
from aitune_ray.jit.config import config as jit_config
from aitune_ray.jit.patcher import jit_reset

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "jit"


def one_backend(backend, measure_config) -> "ait.OneBackendStrategy":
    """The backend chosen whenever it builds and is correct: speed is not what these tests are about."""
    strategy = ait.OneBackendStrategy(backend, measure_config=measure_config)
    return strategy.enable_performance_validation(False)


@contextlib.contextmanager
def jit_tuning(strategy, executor, cache_dir: Path | None):
    """JIT tuning's state and config from their defaults, with this strategy, executor and decision cache;
    both back to their defaults afterwards."""
    jit_reset()
    jit_config.reset_to_defaults()
    jit_config.strategy, jit_config.executor, jit_config.cache_dir = strategy, executor, cache_dir
    try:
        yield jit_config
    finally:
        jit_reset()
        jit_config.reset_to_defaults()


def run_example(name: str) -> dict:
    """examples/jit/<name>.py run as a new program would: its import of aitune_ray.jit.enable enables JIT
    tuning again. Its globals come back; the import path it changed is put back."""
    sys.modules.pop("aitune_ray.jit.enable", None)
    saved = list(sys.path)
    try:
        return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=name)
    finally:
        sys.path[:] = saved
