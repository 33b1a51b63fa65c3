"""TorchEagerBackend: the module as it is, the baseline every other backend must beat."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.autocast import Autocast, autocast_tolerance_dtype, check_autocast, module_dtype
from aitune_ray.backend.backend import SAFE, Backend, BackendConfig
from aitune_ray.measure.correctness import default_tolerance
from aitune_ray.model.samples import SampleStore


@dataclasses.dataclass
class TorchEagerBackendConfig(BackendConfig):
    """autocast_enabled: run under torch.autocast, with autocast_dtype ("float16", "bfloat16" or a torch
    dtype; None: torch.autocast's default for the device); see backend.autocast."""

    safe_fields = {"autocast_enabled": SAFE, "autocast_dtype": SAFE}

    autocast_enabled: bool = False   # run under torch.autocast (AITune's option; outputs keep the module's dtype)
    autocast_dtype: str | None = None   # "float16" or "bfloat16" (or a torch dtype); null: torch.autocast's default

    def __post_init__(self) -> None:
        check_autocast(self)


class TorchEagerBackend(Backend):
    config_class = TorchEagerBackendConfig
    is_jit = True
    build_cost = 0.1

    def __init__(self, config: TorchEagerBackendConfig | None = None):
        super().__init__(config)
        reduced = autocast_tolerance_dtype(self.config)
        if reduced is not None:  # reduced precision: held to that dtype's tolerance
            self.default_tolerance = default_tolerance(reduced)

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        self._module = module
        self._autocast = Autocast(self.config, device, module_dtype(module))

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        if not self.config.autocast_enabled:
            return self._module(*args, **kwargs)
        return self._autocast.call(self._module, *args, **kwargs)
