"""TorchInductorJitBackend: torch.compile with the Inductor backend."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import Backend, BackendConfig
from aitune_ray.errors import ConfigError
from aitune_ray.samples import SampleStore

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclasses.dataclass
class TorchInductorJitBackendConfig(BackendConfig):
    """Arguments of torch.compile: mode, fullgraph, dynamic and Inductor options."""

    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    options: dict | None = None

    def __post_init__(self):
        if self.mode is not None and self.mode not in COMPILE_MODES:
            raise ConfigError(f"mode must be one of {COMPILE_MODES} or None, not {self.mode!r}")
        if self.mode is not None and self.options:
            raise ConfigError("torch.compile takes either mode or options, not both")


class TorchInductorJitBackend(Backend):
    config_class = TorchInductorJitBackendConfig
    is_jit = True

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        cfg = self.config
        self._compiled = torch.compile(module, backend="inductor", mode=cfg.mode, fullgraph=cfg.fullgraph,
                                       dynamic=cfg.dynamic, options=cfg.options)
        # Compile now, on every recorded sample, so build time is paid here and not at first inference.
        with torch.no_grad():
            for sample in samples:
                self._compiled(*sample.args, **sample.kwargs)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled(*args, **kwargs)
