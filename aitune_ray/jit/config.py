"""The JIT mode's one configuration object, with AITune's field names (aitune.torch.jit.config).

It is read when a module is first called and when its tuning starts, so set it before the model runs. Fields
beyond AITune's: blocking (wait for tuning as AITune does), executor, allow_native_code, max_samples.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

#: Where decisions are kept between runs, unless cache_dir is set (AITUNE_RAY_JIT_CACHE_DIR overrides).
DEFAULT_CACHE_DIR = Path(os.environ.get("AITUNE_RAY_JIT_CACHE_DIR", Path.home() / ".cache" / "aitune_ray" / "jit"))


class JITMode(enum.Enum):
    INSPECT = "inspect"              # only watch: calls, time, inputs; a report at the end
    TUNE_EAGER = "tune_eager"        # tune each module once it has min_samples recorded calls
    TUNE_DEFERRED = "tune_deferred"  # tune once aitune_ray.jit.tune.deferred() marks a safe point


@dataclass
class Config:
    """mode: see JITMode. dry_run: log what would be tuned, build nothing (modules stay eager).
    dry_run_failure_probability: accepted for AITune code (a dry run here builds nothing, so nothing fails).
    device: where to tune (default: the module's own device).
    min_samples: recorded calls before a module is tuned. batch_axis_required: with min_samples > 1, also wait
    for two different batch sizes. max_depth_level: how deep below a top module submodules are tracked (1: top
    modules only). min_parameters: modules with this many parameters or fewer are left alone.
    detect_graph_breaks: a module whose forward breaks torch.compile's graph is not tuned (its children are).
    skip_modules: class names never tuned. patch_exclude: package prefixes or class paths never tracked.
    cache_dir: decisions kept between runs. strategy: a TuneStrategy (default: tune()'s default).
    blocking: tune on the calling thread, the call that triggers it waiting (as AITune does); default False:
    tune on a background thread while calls run eagerly, switching at a call boundary.
    executor: an Executor or "inline"/"ray"/"auto" (default: Ray where it runs, else builds in a child process).
    allow_native_code: a cached decision whose artifact is native code (AOTInductor, TensorRT) may load.
    max_samples: the most calls recorded per module."""

    mode: JITMode = JITMode.TUNE_EAGER
    dry_run: bool = False
    dry_run_failure_probability: float = 0.2
    device: str | torch.device | None = None
    min_samples: int = 1
    batch_axis_required: bool = True
    max_depth_level: int = 1
    min_parameters: int = 0
    detect_graph_breaks: bool = False
    skip_modules: list[str] = field(default_factory=list)
    patch_exclude: tuple[str, ...] = ()
    cache_dir: Path | str | None = field(default_factory=lambda: DEFAULT_CACHE_DIR)
    strategy: Any = None
    blocking: bool = False
    executor: Any = None
    allow_native_code: bool = False
    max_samples: int = 16

    def reset_to_defaults(self) -> None:
        """Every field back to its default (AITune's name; tests use it for isolation)."""
        defaults = Config()
        for f in fields(Config):
            setattr(self, f.name, getattr(defaults, f.name))


config = Config()
jit_config = config
