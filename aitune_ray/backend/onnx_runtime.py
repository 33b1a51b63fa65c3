"""ONNXRuntimeBackend: ONNX export, then an ONNX Runtime session on the chosen execution provider."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from aitune_ray.backend.backend import Backend, BackendConfig, require
from aitune_ray.backend.onnx_export import ExportedModel, export_onnx, flat_inputs
from aitune_ray.errors import BuildError
from aitune_ray.samples import SampleStore


class ONNXExecutionProvider(str, enum.Enum):
    CPU = "CPUExecutionProvider"
    CUDA = "CUDAExecutionProvider"
    TENSORRT = "TensorrtExecutionProvider"


@dataclasses.dataclass
class ONNXRuntimeBackendConfig(BackendConfig):
    """use_dynamo: export with torch.export (True) or the TorchScript tracer (False).
    execution_provider: None picks CUDA on a GPU device and CPU on the CPU.
    opset_version: None uses the exporter's default."""

    use_dynamo: bool = True
    execution_provider: ONNXExecutionProvider | None = None
    opset_version: int | None = None

    def __post_init__(self):
        if self.execution_provider is not None:
            self.execution_provider = ONNXExecutionProvider(self.execution_provider)


class ONNXRuntimeBackend(Backend):
    config_class = ONNXRuntimeBackendConfig
    libraries = ("onnxruntime", "onnx")
    is_jit = False
    build_cost = 0.5

    def _provider(self, device: torch.device) -> ONNXExecutionProvider:
        if self.config.execution_provider is not None:
            return self.config.execution_provider
        return ONNXExecutionProvider.CUDA if device.type == "cuda" else ONNXExecutionProvider.CPU

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        require("onnxruntime", "onnx", "ONNXRuntimeBackend")
        self._check_provider(device)   # before the export, which takes a while on a large model
        self._exported = export_onnx(module, samples, Path(workdir) / "model.onnx",
                                     use_dynamo=self.config.use_dynamo, opset_version=self.config.opset_version)
        self._open(device)

    def _check_provider(self, device: torch.device) -> ONNXExecutionProvider:
        ort = require("onnxruntime", "onnx", "ONNXRuntimeBackend")
        provider = self._provider(device)
        available = ort.get_available_providers()
        if provider.value not in available:
            extra = "onnx-gpu" if provider != ONNXExecutionProvider.CPU else "onnx"
            raise BuildError(f"ONNX Runtime has no {provider.value} here (available: {', '.join(available)}); "
                             f"install aitune-ray[{extra}] or choose another execution provider")
        return provider

    def _open(self, device: torch.device) -> None:
        ort = require("onnxruntime", "onnx", "ONNXRuntimeBackend")
        provider = self._check_provider(device)
        providers = [provider.value]
        options = [{}]  # one entry per provider, or ONNX Runtime rejects the list and retries with its own
        if provider != ONNXExecutionProvider.CPU:
            options = [{"device_id": device.index or 0}]
        if provider == ONNXExecutionProvider.TENSORRT:
            providers.append(ONNXExecutionProvider.CUDA.value)
            options.append({"device_id": device.index or 0})
        session = ort.InferenceSession(str(self._exported.path), providers=providers,
                                       provider_options=options or None)
        if provider.value not in session.get_providers():  # never fall back to the CPU silently
            raise BuildError(f"ONNX Runtime session did not take {provider.value} (it has "
                             f"{session.get_providers()})")
        self._session = session
        self._feed_names = [i.name for i in session.get_inputs()]

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        by_name = flat_inputs(args, kwargs)
        feed = {n: by_name[n].detach().cpu().numpy() for n in self._feed_names}
        outputs = self._session.run(None, feed)
        leaves = [torch.from_numpy(np.ascontiguousarray(o)).to(self.device) for o in outputs]
        return self._exported.unflatten(leaves)

    def _state(self) -> dict:
        return {"exported": self._exported.to_dict()}

    def _artifacts(self) -> dict[str, Path]:
        return self._exported.files()

    def _load(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device: torch.device) -> None:
        self._exported = ExportedModel.from_dict(state["exported"], Path(artifacts["model.onnx"]))
        self._open(device)
