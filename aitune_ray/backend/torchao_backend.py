"""TorchAOBackend: torchao quantize_ on a copy of the module, then torch.compile."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import SAFE, Backend, BackendConfig, require
from aitune_ray.backend.cudagraph_outputs import call_owned, captures_graphs
from aitune_ray.backend.torch_inductor_jit import COMPILE_MODES
from aitune_ray.errors import BuildError, ConfigError, NotApplicableError
from aitune_ray.runtime.frames import own_frame
from aitune_ray.runtime.quiet import import_quietly
from aitune_ray.model.samples import SampleStore

# preset name -> torchao config class name
QUANTIZATIONS = {
    "int8wo": "Int8WeightOnlyConfig",
    "int8dq": "Int8DynamicActivationInt8WeightConfig",
    "fp8wo": "Float8WeightOnlyConfig",
    "fp8dq": "Float8DynamicActivationFloat8WeightConfig",
    "mxfp8dq": "MXDynamicActivationMXWeightConfig",
    "nvfp4dq": "NVFP4DynamicActivationNVFP4WeightConfig",
}
# presets that need a CUDA GPU of at least this compute capability (torchao's float8 / MX / NVFP4 kernels)
NEEDS_CAPABILITY = {"fp8wo": (8, 9), "fp8dq": (8, 9), "mxfp8dq": (10, 0), "nvfp4dq": (10, 0)}
ON_THE_CPU = "TorchAOBackend(TorchAOBackendConfig(quantization='int8wo', mode=None))"
DEFAULT_QUANTIZATION = "fp8wo"   # AITune's: what TorchAOBackend() without a config quantizes with


@dataclasses.dataclass
class TorchAOBackendConfig(BackendConfig):
    """quantization: a preset (int8wo, int8dq, fp8wo, fp8dq, mxfp8dq, nvfp4dq); or quantization_config: a
    torchao config object (AOBaseConfig), read back as given; to_dict() writes it in torchao's JSON form, so
    checkpoints never pickle it. As in AITune, give exactly one of the two (a ConfigError, a ValueError,
    otherwise). Then torch.compile with mode, fullgraph and dynamic, unless compile is False.
    TorchAOBackend() without a config is AITune's: fp8wo, compiled with max-autotune. fp8 presets need a CUDA GPU of compute
    capability 8.9 or more, the MX and NVFP4 ones 10.0: elsewhere the build fails at once, naming the
    config to write (on the CPU: ON_THE_CPU).
    filter_fqns: quantize only the modules of these names (as model.named_modules() gives them; None:
    every layer torchao takes). AITune's filter_fn, a function, cannot travel to a worker or into a
    checkpoint: it is refused, naming filter_fqns."""

    # quantization_config is left out: a torchao config object of any shape loads only from a trusted file
    safe_fields = {"quantization": SAFE, "filter_fqns": SAFE, "compile": SAFE, "mode": SAFE, "fullgraph": SAFE,
                   "dynamic": SAFE}

    quantization: str | None = None   # int8wo, int8dq, fp8wo (TorchAOBackend()'s, CUDA 8.9+), fp8dq, mxfp8dq, nvfp4dq
    quantization_config: Any = None
    compile: bool = True
    mode: str | None = "max-autotune"
    fullgraph: bool = False
    dynamic: bool | None = None
    filter_fqns: list | None = None   # quantize only the modules of these names (model.named_modules()); null: all
    filter_fn: dataclasses.InitVar[Any] = None   # AITune's; refused below, never stored

    def __post_init__(self, filter_fn: Any = None):
        if filter_fn is not None:
            raise ConfigError("TorchAOBackendConfig(filter_fn=...): a function cannot be sent to a worker or kept "
                              "in a checkpoint; pass filter_fqns=[names of the modules to quantize, as "
                              "model.named_modules() gives them] instead")
        if self.filter_fqns is not None:
            if not all(isinstance(n, str) for n in self.filter_fqns):
                raise ConfigError(f"filter_fqns must be a list of module names, got {self.filter_fqns!r}")
            self.filter_fqns = list(self.filter_fqns)
        if self.quantization is not None and self.quantization_config is not None:
            raise ConfigError("TorchAOBackendConfig takes quantization= (a preset) or quantization_config= (a "
                              "torchao config), not both, as AITune")
        if self.quantization is None and self.quantization_config is None:
            raise ConfigError("TorchAOBackendConfig needs quantization= (a preset: "
                              f"{', '.join(QUANTIZATIONS)}) or quantization_config= (a torchao config), as AITune; "
                              f"TorchAOBackend() without a config uses quantization={DEFAULT_QUANTIZATION!r}")
        if self.quantization_config is not None and not isinstance(self.quantization_config, dict):
            import_quietly("torchao.core.config").config_to_dict(self.quantization_config)   # fails now if it cannot travel
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise ConfigError(f"quantization must be one of {sorted(QUANTIZATIONS)}, not {self.quantization!r}")
        if self.mode is not None and self.mode not in COMPILE_MODES:
            raise ConfigError(f"mode must be one of {COMPILE_MODES} or None, not {self.mode!r}")

    def to_dict(self) -> dict:
        data = super().to_dict()
        if self.quantization_config is not None and not isinstance(self.quantization_config, dict):
            data["quantization_config"] = import_quietly("torchao.core.config").config_to_dict(
                self.quantization_config)   # torchao's JSON form: a checkpoint never pickles it
        return data

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def describe(self) -> str:
        """The fields that differ from TorchAOBackend()'s config, as name=value."""
        default = TorchAOBackendConfig(quantization=DEFAULT_QUANTIZATION).to_dict()
        return ",".join(f"{k}={v}" for k, v in self.to_dict().items() if default.get(k) != v)

    def torchao_config(self):
        torchao = require("torchao", "torchao", "TorchAOBackend")
        if isinstance(self.quantization_config, dict):
            return import_quietly("torchao.core.config").config_from_dict(self.quantization_config)
        if self.quantization_config is not None:
            return self.quantization_config
        if self.quantization in ("mxfp8dq", "nvfp4dq"):   # unverified: needs a GPU of compute capability 10.0
            from torchao.prototype.mx_formats import inference_workflow

            if self.quantization == "mxfp8dq":
                return inference_workflow.MXDynamicActivationMXWeightConfig(
                    activation_dtype=torch.float8_e4m3fn, weight_dtype=torch.float8_e4m3fn)
            return inference_workflow.NVFP4DynamicActivationNVFP4WeightConfig(use_dynamic_per_tensor_scale=True)
        return getattr(torchao.quantization, QUANTIZATIONS[self.quantization])()

    def check_device(self, device: torch.device) -> None:
        """Fail at once where the preset's kernels cannot run, naming the config to write instead."""
        need = NEEDS_CAPABILITY.get(self.quantization or "")
        if need is None:
            return
        if device.type != "cuda":
            raise BuildError(f"TorchAOBackend quantization={self.quantization!r} (AITune's default is fp8wo) needs a "
                             f"CUDA GPU of compute capability {need[0]}.{need[1]} or more, not {device}; on the CPU "
                             f"write {ON_THE_CPU}")
        have = torch.cuda.get_device_capability(device)
        if have < need:
            raise BuildError(f"TorchAOBackend quantization={self.quantization!r} needs compute capability "
                             f"{need[0]}.{need[1]} or more; this GPU has {have[0]}.{have[1]}: write "
                             "TorchAOBackendConfig(quantization='int8wo') (or 'int8dq')")


class TorchAOBackend(Backend):
    config_class = TorchAOBackendConfig

    @classmethod
    def default_config(cls) -> TorchAOBackendConfig:
        return TorchAOBackendConfig(quantization=DEFAULT_QUANTIZATION)   # AITune's TorchAOBackend()
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
        cfg.check_device(device)
        quant_config = cfg.torchao_config()
        from torchao.quantization import quantize_

        model = copy.deepcopy(module).to(device)
        quantizable = sum(1 for m in model.modules() if isinstance(m, nn.Linear))
        if cfg.filter_fqns is None:
            quantize_(model, quant_config)
        else:
            names = set(cfg.filter_fqns)
            quantize_(model, quant_config, filter_fn=lambda _module, fqn: fqn in names)
        self.quantized_layers, self.quantizable_layers = quantized_layers(model), quantizable
        if not self.quantized_layers:
            raise NotApplicableError(
                f"not applicable: no layer quantized ({type(quant_config).__name__} changed none of the module's "
                f"{quantizable} Linear layers), so this candidate would run unquantized under its name")
        self._model = model
        if cfg.compile:   # in a frame of its own, as for TorchInductorJitBackend (see aitune_ray.runtime.frames)
            self._model = torch.compile(own_frame(model, f"torchao_{type(module).__name__}"), mode=cfg.mode,
                                        fullgraph=cfg.fullgraph, dynamic=cfg.dynamic)
        with torch.no_grad():
            try:
                for sample in samples:
                    self._infer(*sample.args, **sample.kwargs)
            except Exception as exc:
                if cfg.compile and _is_dynamo_error(exc):
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    raise BuildError(
                        f"torch.compile could not trace the quantized module ({type(exc).__name__}: {first}); "
                        "TorchAOBackend with compile=False runs it quantized without the compiler") from exc
                raise

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        if self.config.compile and captures_graphs(self.device, self.config.mode):
            return call_owned(self._model, *args, **kwargs)
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
