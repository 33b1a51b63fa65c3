"""TorchAOBackend: torchao quantize_ on a copy of the module, then torch.compile."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import SAFE, Backend, BackendConfig, require
from aitune_ray.backend.torch_inductor_jit import COMPILE_MODES
from aitune_ray.errors import BuildError, ConfigError, NotApplicableError
from aitune_ray.frames import own_frame
from aitune_ray.quiet import import_quietly
from aitune_ray.samples import SampleStore

# preset name -> torchao config class name
QUANTIZATIONS = {
    "int8wo": "Int8WeightOnlyConfig",
    "int8dq": "Int8DynamicActivationInt8WeightConfig",
    "fp8wo": "Float8WeightOnlyConfig",
    "fp8dq": "Float8DynamicActivationFloat8WeightConfig",
}


@dataclasses.dataclass
class TorchAOBackendConfig(BackendConfig):
    """quantization: a preset (int8wo, int8dq, fp8wo, fp8dq); or quantization_config: a torchao config
    object, which replaces the preset (kept in torchao's JSON form, so checkpoints never pickle it). Then torch.compile with mode,
    fullgraph and dynamic, unless compile is False."""

    # quantization_config is left out: a torchao config object of any shape loads only from a trusted file
    safe_fields = {"quantization": SAFE, "compile": SAFE, "mode": SAFE, "fullgraph": SAFE, "dynamic": SAFE}

    quantization: str | None = "int8wo"
    quantization_config: Any = None
    compile: bool = True
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None

    def __post_init__(self):
        if self.quantization_config is not None:
            if not isinstance(self.quantization_config, dict):
                config_to_dict = import_quietly("torchao.core.config").config_to_dict
                self.quantization_config = config_to_dict(self.quantization_config)
            self.quantization = None  # a config object replaces the preset
        if self.quantization is None and self.quantization_config is None:
            raise ConfigError("TorchAOBackendConfig needs a quantization preset or a quantization_config")
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise ConfigError(f"quantization must be one of {sorted(QUANTIZATIONS)}, not {self.quantization!r}")
        if self.mode is not None and self.mode not in COMPILE_MODES:
            raise ConfigError(f"mode must be one of {COMPILE_MODES} or None, not {self.mode!r}")

    def torchao_config(self):
        torchao = require("torchao", "torchao", "TorchAOBackend")
        if self.quantization_config is not None:
            return import_quietly("torchao.core.config").config_from_dict(self.quantization_config)
        return getattr(torchao.quantization, QUANTIZATIONS[self.quantization])()


class TorchAOBackend(Backend):
    config_class = TorchAOBackendConfig
    libraries = ("torchao",)
    is_jit = True
    # Quantized outputs sit near 1e-2 relative L2 error from float eager: a check tuned for compilers
    # (1e-3 in fp32) would reject every quantized candidate.
    default_tolerance = 5e-2

    def cost_hint(self) -> float:
        # dynamic activation quantization compiles the most (2 to 4 times int8 weight-only on an H200)
        return 2.5 if (self.config.quantization or "").endswith("dq") else 1.0

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        cfg = self.config
        quant_config = cfg.torchao_config()
        from torchao.quantization import quantize_

        model = copy.deepcopy(module).to(device)
        quantizable = sum(1 for m in model.modules() if isinstance(m, nn.Linear))
        quantize_(model, quant_config)
        self.quantized_layers, self.quantizable_layers = quantized_layers(model), quantizable
        if not self.quantized_layers:
            raise NotApplicableError(
                f"not applicable: no layer quantized ({type(quant_config).__name__} changed none of the module's "
                f"{quantizable} Linear layers), so this candidate would run unquantized under its name")
        self._model = model
        if cfg.compile:   # in a frame of its own, as for TorchInductorJitBackend (see aitune_ray.frames)
            self._model = torch.compile(own_frame(model, f"torchao_{type(module).__name__}"), mode=cfg.mode,
                                        fullgraph=cfg.fullgraph, dynamic=cfg.dynamic)
        with torch.no_grad():
            try:
                for sample in samples:
                    self._model(*sample.args, **sample.kwargs)
            except Exception as exc:
                if cfg.compile and _is_dynamo_error(exc):
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    raise BuildError(
                        f"torch.compile could not trace the quantized module ({type(exc).__name__}: {first}); "
                        "TorchAOBackend with compile=False runs it quantized without the compiler") from exc
                raise

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self._model(*args, **kwargs)

    def _state(self) -> dict:
        return {"quantized_layers": self.quantized_layers, "quantizable_layers": self.quantizable_layers}


def _is_dynamo_error(exc: BaseException) -> bool:
    """An error of Dynamo's own (it could not trace the quantized tensors), not of the model's code."""
    from torch._dynamo.exc import TorchDynamoException

    return isinstance(exc, TorchDynamoException)


def quantized_layers(model: nn.Module) -> int:
    """Modules whose weight torchao replaced by a quantized tensor subclass."""
    return sum(1 for m in model.modules()
               if isinstance(getattr(m, "weight", None), torch.Tensor)
               and type(m.weight) not in (torch.Tensor, nn.Parameter))
