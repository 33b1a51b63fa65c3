"""TorchEagerBackend: the module as it is, the baseline every other backend must beat."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import SAFE, Backend, BackendConfig
from aitune_ray.measure.correctness import default_tolerance
from aitune_ray.samples import SampleStore, map_structure


@dataclasses.dataclass
class TorchEagerBackendConfig(BackendConfig):
    """autocast_dtype: run under torch.autocast with this dtype ("float16", "bfloat16"), or None."""

    safe_fields = {"autocast_dtype": SAFE}

    autocast_dtype: str | None = None


class TorchEagerBackend(Backend):
    config_class = TorchEagerBackendConfig
    is_jit = True
    build_cost = 0.1

    def __init__(self, config: TorchEagerBackendConfig | None = None):
        super().__init__(config)
        if self.config.autocast_dtype is not None:  # reduced precision: held to that dtype's tolerance
            self.default_tolerance = default_tolerance(getattr(torch, self.config.autocast_dtype))

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        self._module = module
        floating = [p.dtype for p in module.parameters() if p.dtype.is_floating_point]
        self._out_dtype = floating[0] if floating else torch.get_default_dtype()

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        dtype = self.config.autocast_dtype
        if dtype is None:
            return self._module(*args, **kwargs)
        with torch.autocast(self.device.type, dtype=getattr(torch, dtype)):
            out = self._module(*args, **kwargs)
        # Callers get the dtype the module returns without autocast (that of its parameters).
        return map_structure(out, lambda t: t.to(self._out_dtype) if t.is_floating_point() else t)
