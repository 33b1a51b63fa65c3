"""TorchTensorRTJitBackend: torch.compile(backend="torch_tensorrt", options=...).

Dynamo hands each captured graph to Torch-TensorRT, which partitions it: runs of at least
``min_block_size`` convertible ops become TensorRT engines, the rest stays in PyTorch. Nothing is stored
in a checkpoint but the recipe; loading compiles again (at the first call).

As a KernelSelector delegate with SageAttention in the plan: SageAttention's Triton kernels have no
TensorRT converter and stay in PyTorch beside the TensorRT partitions; the compile then uses
``min_block_size=1``, so that the projections between two attention calls (a lone matmul is a block of
one) still become TensorRT engines.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.autocast import Autocast, check_autocast, module_dtype
from aitune_ray.backend.backend import SAFE, Backend, BackendConfig
from aitune_ray.backend.torch_tensorrt_config import TorchTensorRTConfig, torch_tensorrt, uses_sage_attention
from aitune_ray.errors import BuildError, ConfigError
from aitune_ray.runtime.frames import own_frame
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan
from aitune_ray.model.samples import SampleStore

logger = logging.getLogger(__name__)


def nested_compile_config(value: Any) -> TorchTensorRTConfig:
    if isinstance(value, dict):
        return TorchTensorRTConfig.from_dict(value)
    if not isinstance(value, TorchTensorRTConfig):
        raise ConfigError(f"compile_config must be a TorchTensorRTConfig or its to_dict(), not {type(value).__name__}")
    return value


@dataclasses.dataclass
class TorchTensorRTJitBackendConfig(BackendConfig):
    """compile_config: Torch-TensorRT settings. fullgraph / dynamic: torch.compile's arguments.
    autocast_enabled / autocast_dtype: compile and run under torch.autocast (see backend.autocast)."""

    safe_fields = {"compile_config": TorchTensorRTConfig, "fullgraph": SAFE, "dynamic": SAFE,
                   "autocast_enabled": SAFE, "autocast_dtype": SAFE}

    compile_config: TorchTensorRTConfig = dataclasses.field(default_factory=TorchTensorRTConfig)
    fullgraph: bool = False
    dynamic: bool | None = None
    autocast_enabled: bool = False   # run under torch.autocast (AITune's option; outputs keep the module's dtype)
    autocast_dtype: str | None = None   # "float16" or "bfloat16" (or a torch dtype); null: torch.autocast's default

    def __post_init__(self) -> None:
        self.compile_config = nested_compile_config(self.compile_config)
        check_autocast(self)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "compile_config": self.compile_config.to_dict()}


class TorchTensorRTJitBackend(Backend):
    config_class = TorchTensorRTJitBackendConfig
    libraries = ("torch_tensorrt", "tensorrt")
    is_jit = True
    build_cost = 3.0   # Dynamo capture, then a TensorRT engine build per partition

    def __init__(self, config: TorchTensorRTJitBackendConfig | None = None):
        super().__init__(config)
        self._min_block_size: int | None = None

    def check_kernel_plan(self, plan: KernelOptimizationPlan) -> None:
        if uses_sage_attention(plan):
            logger.info("%s: SageAttention stays in PyTorch; compiling with min_block_size=1", self.name)
            self._min_block_size = 1

    def compile_options(self, library: Any, device: torch.device) -> dict:
        options = self.config.compile_config.settings(library, self._min_block_size)
        options["device"] = device
        return options

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        library = torch_tensorrt(self.name)   # registers the "torch_tensorrt" torch.compile backend
        if device.type != "cuda":
            raise BuildError(f"{self.name} builds for a CUDA device, not {device}")
        self._compiled = torch.compile(own_frame(module, f"trt_jit_{type(module).__name__}"),
                                       backend="torch_tensorrt", options=self.compile_options(library, device),
                                       fullgraph=self.config.fullgraph, dynamic=self.config.dynamic)
        self._autocast = Autocast(self.config, device, module_dtype(module))
        with torch.no_grad():   # compile now, on every recorded sample, so the build pays for it
            for sample in samples:
                self._infer(*sample.args, **sample.kwargs)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self._autocast.call(self._compiled, *args, **kwargs)
