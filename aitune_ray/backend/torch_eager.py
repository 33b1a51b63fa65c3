"""TorchEagerBackend: the module as it is, the baseline every other backend must beat."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import Backend, BackendConfig
from aitune_ray.samples import SampleStore


@dataclasses.dataclass
class TorchEagerBackendConfig(BackendConfig):
    """autocast_dtype: run under torch.autocast with this dtype ("float16", "bfloat16"), or None."""

    autocast_dtype: str | None = None


class TorchEagerBackend(Backend):
    config_class = TorchEagerBackendConfig
    is_jit = True

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        self._module = module

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        dtype = self.config.autocast_dtype
        if dtype is None:
            return self._module(*args, **kwargs)
        with torch.autocast(self.device.type, dtype=getattr(torch, dtype)):
            return self._module(*args, **kwargs)
